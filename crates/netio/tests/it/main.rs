//! Integration tests of pmwire-netio: one binary, case modules.

mod common;
mod conn_limits;
mod echo;
mod kv;
mod limits;
mod listeners;
mod load;
mod wakeups;
mod watch;
