//! pmwire-btree (in progress).
