//! The read buffers of a worker's connections. A connection takes one when
//! bytes arrive and gives it back when it goes idle with nothing unread, so
//! an idle keep-alive connection holds no buffer (as nginx frees an idle
//! connection's). The write buffers responses are put together in come
//! from here too. Per thread: a worker's runtime is one thread.

use std::cell::RefCell;

use bytes::BytesMut;

/// A buffer's size when taken: a head and a first read of body fit.
pub const SIZE: usize = 4096;
/// Buffers kept for reuse; beyond that they go back to the allocator.
const KEEP: usize = 64;

thread_local! {
    static FREE: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
    static FREE_OUT: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// A response's head and first body bytes are written into one of these
/// before they go out: its room when taken.
pub const OUT: usize = 1024;

/// An empty write buffer with room for at least `OUT` bytes, one given
/// back before if there is one (a response's head costs no allocation).
pub fn take_out() -> Vec<u8> {
    let mut b = FREE_OUT.with(|f| f.borrow_mut().pop()).unwrap_or_default();
    b.reserve(OUT);
    b
}

/// Gives a write buffer back, emptied; one grown past a few pages goes
/// back to the allocator.
pub fn give_out(mut b: Vec<u8>) {
    if b.capacity() > 4 * SIZE {
        return;
    }
    b.clear();
    FREE_OUT.with(|f| {
        let mut f = f.borrow_mut();
        if f.len() < KEEP {
            f.push(b);
        }
    });
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

    #[test]
    fn write_buffers_are_reused_emptied_and_bounded() {
        let mut a = take_out();
        assert!(a.capacity() >= OUT);
        a.extend_from_slice(b"written");
        let ptr = a.as_ptr();
        give_out(a);
        let b = take_out();
        assert!(b.is_empty(), "given back emptied");
        assert_eq!(b.as_ptr(), ptr, "taken again");
        let kept = || FREE_OUT.with(|f| f.borrow().len());
        let before = kept();
        let mut big = b;
        big.reserve(8 * SIZE);
        give_out(big);
        assert_eq!(kept(), before, "a grown one is not kept");
        give_out(Vec::with_capacity(OUT));
        assert_eq!(kept(), before + 1, "one of the usual size is");
    }
}
