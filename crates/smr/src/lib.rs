//! smr
