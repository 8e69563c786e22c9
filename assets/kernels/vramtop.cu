// vramtop's GPU kernels: fill and verify a byte pattern, and keep the SMs busy.
//
// Compiled at run time by NVRTC for the device's own architecture, or loaded
// from vramtop.ptx (made from this file, see README.md) when NVRTC is absent.
// Plain CUDA C with no includes, so that NVRTC needs no headers and the file
// also compiles as host C++ (the fake driver in tests/fixtures runs these
// kernels on the CPU). Every kernel is a grid-stride loop with no shared
// memory and no __syncthreads, so any grid size is correct.
//
// The pattern must be exactly vramtop::device::pattern_byte (src/device/mod.rs),
// in 32-bit arithmetic:
//   x    = (u32)offset ^ (seed * 0x9E3779B9)
//   byte = (x * 0x01000193) >> 24
// Bytes pattern_byte gives (tests/cuda_backend.rs checks this table against it;
// keep the "pattern" prefix, offset, seed and byte in hexadecimal):
//   pattern 0x0 0x0 0x00
//   pattern 0x1 0x0 0x01
//   pattern 0xff 0x0 0xff
//   pattern 0x0 0x1 0xca
//   pattern 0x3e8 0x7 0x60
//   pattern 0xfff 0xdeadbeef 0x5b
//   pattern 0x100000007 0x2a 0x34
//   pattern 0xffffffffffffffff 0xffffffff 0xc9
//   pattern 0x75bcd15 0xbb40e64d 0x31

__device__ __forceinline__ unsigned int vramtop_pattern_byte(unsigned long long offset,
                                                             unsigned int seed)
{
    unsigned int x = (unsigned int)offset ^ (seed * 0x9E3779B9u);
    return (x * 0x01000193u) >> 24;
}

// The four pattern bytes at offsets [word_offset, word_offset + 4), packed
// little-endian as a 32-bit load or store of them sees them.
__device__ __forceinline__ unsigned int vramtop_pattern_word(unsigned long long word_offset,
                                                             unsigned int seed)
{
    return vramtop_pattern_byte(word_offset, seed)
         | (vramtop_pattern_byte(word_offset + 1, seed) << 8)
         | (vramtop_pattern_byte(word_offset + 2, seed) << 16)
         | (vramtop_pattern_byte(word_offset + 3, seed) << 24);
}

// Writes pattern_byte(i, seed) to p[i] for i in [0, len). Each thread handles
// 4-byte words: one 32-bit store when p is 4-byte aligned and the word is
// whole, byte stores otherwise (unaligned p, the tail).
extern "C" __global__ void fill_pattern(unsigned char* p, unsigned long long len, unsigned int seed)
{
    const unsigned long long words = (len + 3) / 4;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const bool aligned = (((unsigned long long)p) & 3) == 0;
    for (unsigned long long w = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         w < words; w += stride) {
        const unsigned long long off = w * 4;
        if (aligned && off + 4 <= len) {
            *(unsigned int*)(p + off) = vramtop_pattern_word(off, seed);
        } else {
            for (unsigned long long i = off; i < off + 4 && i < len; ++i) {
                p[i] = (unsigned char)vramtop_pattern_byte(i, seed);
            }
        }
    }
}

// Checks p[i] == pattern_byte(i, seed) for i in [0, len) and lowers
// *first_bad to the smallest wrong offset. The caller sets *first_bad to
// 0xFFFFFFFFFFFFFFFF (ULLONG_MAX: "no wrong byte") before the launch.
extern "C" __global__ void verify_pattern(const unsigned char* p, unsigned long long len,
                                          unsigned int seed, unsigned long long* first_bad)
{
    const unsigned long long words = (len + 3) / 4;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const bool aligned = (((unsigned long long)p) & 3) == 0;
    for (unsigned long long w = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         w < words; w += stride) {
        const unsigned long long off = w * 4;
        if (aligned && off + 4 <= len) {
            const unsigned int got = *(const unsigned int*)(p + off);
            const unsigned int want = vramtop_pattern_word(off, seed);
            if (got != want) {
                // The lowest differing byte is the first wrong offset in this word.
                unsigned long long i = off;
                unsigned int diff = got ^ want;
                while ((diff & 0xFFu) == 0) {
                    diff >>= 8;
                    ++i;
                }
                atomicMin(first_bad, i);
            }
        } else {
            for (unsigned long long i = off; i < off + 4 && i < len; ++i) {
                if (p[i] != (unsigned char)vramtop_pattern_byte(i, seed)) {
                    atomicMin(first_bad, i);
                    break;
                }
            }
        }
    }
}

// Keeps the SMs busy: `iterations` rounds of four independent FMA chains per
// thread (independent so that the FMA pipes, not their latency, bound the
// time). scratch holds one float per launched thread; writing the result
// there keeps the compiler from removing the loop.
extern "C" __global__ void burn(float* scratch, unsigned int iterations)
{
    const unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
    float a = (float)t * 1.0e-7f;
    float b = a + 0.25f;
    float c = a + 0.5f;
    float d = a + 0.75f;
    for (unsigned int i = 0; i < iterations; ++i) {
        // x -> x * 0.9999 + 0.0001 converges to 1, so nothing overflows or
        // turns denormal however long it runs.
        a = fmaf(a, 0.9999f, 0.0001f);
        b = fmaf(b, 0.9999f, 0.0001f);
        c = fmaf(c, 0.9999f, 0.0001f);
        d = fmaf(d, 0.9999f, 0.0001f);
    }
    scratch[t] = a + b + c + d;
}
