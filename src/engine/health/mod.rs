//! Health: CEL rules over the inventoried objects, the per-object state machine, and the
//! observer's health loop that writes `Healthy`, `healthSummary` and hook states.
//!
//! Spec: health-loop.txt; status-and-conditions.txt (Healthy: NotConfigured, Pending,
//! Unknown); DESIGN.md section 3 (progressBackoff, pollHookWorkload, wake-ups).

pub mod assess;
pub mod defaults;
pub mod pass;
pub mod rules;
pub mod state;

pub use assess::{Assessment, assess};
pub use pass::{HealthMemory, HealthPass, health_pass};
pub use rules::{Evaluation, Evaluator, RuleError};
