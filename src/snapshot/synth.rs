//! Generators of large, realistic snapshots (see [`large`]).
