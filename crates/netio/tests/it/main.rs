//! Integration tests of pmwire-netio: one binary, case modules.

mod common;
mod echo;
mod kv;
mod limits;
mod listeners;
mod load;
mod wakeups;
mod watch;
