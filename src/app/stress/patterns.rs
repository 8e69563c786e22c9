//! How the stress panel chooses the sizes of an allocation: a fixed size,
//! log-uniform random sizes from a seeded generator, or one training step of
//! a small transformer.

use serde::Serialize;

/// The smallest size the random pattern draws (bytes): PyTorch's 512-byte
/// rounding unit, so every draw is a distinct block.
pub const RANDOM_MIN_BYTES: u64 = 512;

/// The seed of the random pattern: the same key presses give the same sizes.
pub const DEFAULT_SEED: u64 = 0x5eed_5eed;

/// How an allocation chooses its sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Pattern {
    /// Every tensor has the selected size.
    Fixed,
    /// Sizes are log-uniform between [`RANDOM_MIN_BYTES`] and the selected
    /// size: as many 1 KiB tensors as 1 MiB ones, like a mixed workload.
    RandomLogUniform,
    /// One training step of [`TRANSFORMER`]: its weights on the first
    /// allocation, then every layer's activations
    /// ([`transformer_step_sizes`]); size and count are not used.
    TransformerStep,
}

impl Pattern {
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Fixed => "fixed",
            Pattern::RandomLogUniform => "random log-uniform",
            Pattern::TransformerStep => "transformer step",
        }
    }

    /// The next pattern `r` selects.
    pub fn next(self) -> Pattern {
        match self {
            Pattern::Fixed => Pattern::RandomLogUniform,
            Pattern::RandomLogUniform => Pattern::TransformerStep,
            Pattern::TransformerStep => Pattern::Fixed,
        }
    }
}

/// The shape of the small transformer whose training step the
/// transformer pattern allocates (fp32, so 4 bytes an element).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TransformerShape {
    pub layers: u64,
    pub d_model: u64,
    pub heads: u64,
    pub seq: u64,
    pub batch: u64,
    pub vocab: u64,
}

/// 4 layers, d_model 1024, 8 heads, sequence 512, batch 4, vocabulary
/// 8192: about 225 MiB of weights and 488 MiB of activations a step.
pub const TRANSFORMER: TransformerShape = TransformerShape {
    layers: 4,
    d_model: 1024,
    heads: 8,
    seq: 512,
    batch: 4,
    vocab: 8192,
};

/// Bytes of one fp32 element.
const FP32: u64 = 4;

impl TransformerShape {
    /// The weights, in allocation order (bytes): the token embedding
    /// (vocab × d), then per layer LayerNorm 1 (weight + bias, 2 × d), the
    /// fused QKV projection (d × 3d), the output projection (d × d),
    /// LayerNorm 2 (2 × d), the MLP up (d × 4d) and down (4d × d)
    /// projections, and the final LayerNorm (2 × d).
    pub fn weights(&self) -> Vec<u64> {
        let d = self.d_model;
        let mut sizes = vec![self.vocab * d * FP32];
        for _ in 0..self.layers {
            sizes.extend([
                2 * d * FP32,
                d * 3 * d * FP32,
                d * d * FP32,
                2 * d * FP32,
                d * 4 * d * FP32,
                4 * d * d * FP32,
            ]);
        }
        sizes.push(2 * d * FP32);
        sizes
    }

    /// One forward pass's saved activations, in allocation order (bytes;
    /// t = batch × seq tokens): the embedding output (t × d), per layer
    /// Q, K and V (t × 3d), the attention scores (batch × heads × seq ×
    /// seq), the attention output (t × d), the MLP hidden (t × 4d) and
    /// output (t × d), then the logits (t × vocab) and the loss (a scalar).
    pub fn activations(&self) -> Vec<u64> {
        let d = self.d_model;
        let t = self.batch * self.seq;
        let mut sizes = vec![t * d * FP32];
        for _ in 0..self.layers {
            sizes.extend([
                t * 3 * d * FP32,
                self.batch * self.heads * self.seq * self.seq * FP32,
                t * d * FP32,
                t * 4 * d * FP32,
                t * d * FP32,
            ]);
        }
        sizes.extend([t * self.vocab * FP32, FP32]);
        sizes
    }
}

/// The requests of one [`TRANSFORMER`] training step: the weights first
/// when `with_weights`, then the activations.
pub fn transformer_step_sizes(with_weights: bool) -> Vec<u64> {
    let mut sizes = if with_weights {
        TRANSFORMER.weights()
    } else {
        Vec::new()
    };
    sizes.extend(TRANSFORMER.activations());
    sizes
}

/// A deterministic xorshift64* step: the next state and a 64-bit draw.
pub(super) fn next_random(state: u64) -> (u64, u64) {
    let mut x = state.max(1);
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    (x, x.wrapping_mul(0x2545_f491_4f6c_dd1d))
}

/// A log-uniform size in `[lo, hi]` (bytes) from a 64-bit draw.
pub fn log_uniform(draw: u64, lo: u64, hi: u64) -> u64 {
    let (lo, hi) = (lo.max(1).min(hi.max(1)), hi.max(1));
    // 53 bits give a uniform fraction in [0, 1).
    let u = (draw >> 11) as f64 / (1u64 << 53) as f64;
    let (ln_lo, ln_hi) = ((lo as f64).ln(), (hi as f64).ln());
    ((ln_lo + u * (ln_hi - ln_lo)).exp().round() as u64).clamp(lo, hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: u64 = 1 << 10;
    const MIB: u64 = 1 << 20;

    #[test]
    fn log_uniform_stays_within_bounds() {
        for draw in [0, 1, u64::MAX / 2, u64::MAX] {
            let s = log_uniform(draw, 512, 10 * MIB);
            assert!((512..=10 * MIB).contains(&s), "{s}");
        }
        assert_eq!(log_uniform(u64::MAX, 4 * KIB, 4 * KIB), 4 * KIB);
    }
}
