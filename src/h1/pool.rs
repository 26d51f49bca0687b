//! The read buffers of a worker's connections. A connection takes one when
//! bytes arrive and gives it back when it goes idle with nothing unread, so
//! an idle keep-alive connection holds no buffer (as nginx frees an idle
//! connection's). Per thread: a worker's runtime is one thread.

use std::cell::RefCell;

use bytes::BytesMut;

/// A buffer's size when taken: a head and a first read of body fit.
pub const SIZE: usize = 4096;
/// Buffers kept for reuse; beyond that they go back to the allocator.
const KEEP: usize = 64;

thread_local! {
    static FREE: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
}

/// An empty buffer with room for at least `SIZE` bytes.
pub fn take() -> BytesMut {
    let mut b = FREE.with(|f| f.borrow_mut().pop()).unwrap_or_default();
    b.reserve(SIZE);
    b
}

/// Gives a buffer back. One that holds bytes is the caller's to keep.
pub fn give(mut b: BytesMut) {
    if !b.is_empty() {
        return;
    }
    b.clear();
    // A buffer grown for a big head goes back to the allocator.
    if b.capacity() > 4 * SIZE {
        return;
    }
    FREE.with(|f| {
        let mut f = f.borrow_mut();
        if f.len() < KEEP {
            f.push(b);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_reused_and_bounded() {
        let mut a = take();
        assert!(a.capacity() >= SIZE);
        a.extend_from_slice(b"held");
        give(a);
        let b = take();
        assert!(b.is_empty());
        let ptr = b.as_ptr();
        give(b);
        let c = take();
        assert_eq!(c.as_ptr(), ptr, "an empty buffer given back is taken again");
        give(c);
    }
}
