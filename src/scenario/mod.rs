//! Scenarios: small declarative scripts of allocations and frees that replay
//! common PyTorch memory practices on the allocator model, each with a
//! one-paragraph explanation (`docs/scenarios.md` documents the format).
//!
//! Pure: the built-in scenarios are embedded in the binary, and running one
//! touches nothing but the model.

pub mod engine;
pub mod format;

pub use engine::{ScenarioResult, StepResult, Summary, VariantResult, run};
pub use format::{Action, Scenario, ScenarioError, Step, Variant, parse};

/// The built-in scenarios: (name, TOML text), in the order they are listed.
pub const BUILTIN: [(&str, &str); 7] = [
    (
        "no_grad_inference",
        include_str!("../../assets/scenarios/no_grad_inference.toml"),
    ),
    (
        "mixed_precision",
        include_str!("../../assets/scenarios/mixed_precision.toml"),
    ),
    (
        "gradient_accumulation",
        include_str!("../../assets/scenarios/gradient_accumulation.toml"),
    ),
    (
        "empty_cache_live_block",
        include_str!("../../assets/scenarios/empty_cache_live_block.toml"),
    ),
    (
        "fragmentation_oom",
        include_str!("../../assets/scenarios/fragmentation_oom.toml"),
    ),
    (
        "batch_growth_oom",
        include_str!("../../assets/scenarios/batch_growth_oom.toml"),
    ),
    (
        "dataloader_workers",
        include_str!("../../assets/scenarios/dataloader_workers.toml"),
    ),
];

/// The names of the built-in scenarios.
pub fn builtin_names() -> Vec<&'static str> {
    BUILTIN.iter().map(|(n, _)| *n).collect()
}

/// Parses the built-in scenario `name`; `None` when there is none of that name.
pub fn builtin(name: &str) -> Option<Result<Scenario, ScenarioError>> {
    BUILTIN
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, text)| parse(text))
}
