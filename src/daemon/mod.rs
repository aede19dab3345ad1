//! `convoy daemon`: the engine wired into kube-runtime controllers (the Release controller, the
//! observer's drift and health loops, the source and Cluster controllers).
//!
//! Design: DESIGN.md sections 2–4. The loops arrive with their issues; the engine functions
//! they call are the same ones the CLI calls.
