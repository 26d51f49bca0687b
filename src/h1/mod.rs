//! The HTTP/1 codec both sides share: heads parsed in place with `httparse`
//! (`head`), bodies framed by length, chunks or close (`body`), heads
//! written with the names' case kept (`write`), and the per-worker pool the
//! connections' read buffers come from and go back to when idle (`pool`).
//! No I/O here: `http::conn` (the client side) and `upstream::h1conn` (the
//! upstream side) drive it.

pub mod body;
pub mod head;
pub mod pool;
#[cfg(test)]
pub(crate) mod splits;
pub mod write;
