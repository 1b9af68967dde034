//! Graph mode (DESIGN section 13): operators on a backend that compiles are recorded, not run,
//! and their results are pending until a sync point computes them in one compiled program.
//!
//! This module grows in steps; today it holds the shape rules (`rules`), which say what an
//! operator's outputs will be (dtype and shape) without running it.

pub mod rules;
