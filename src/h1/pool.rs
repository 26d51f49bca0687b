//! The read buffers of a worker's connections. A connection takes one when
//! bytes arrive and gives it back when it goes idle with nothing unread, so
//! an idle keep-alive connection holds no buffer (as nginx frees an idle
//! connection's). So do the write buffers (`Out`) that response heads and
//! upstream request heads are put together in. Per thread: a worker's
//! runtime is one thread.

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

/// An empty buffer with room for at least `SIZE` bytes.
pub fn take() -> BytesMut {
    reuse(&FREE, SIZE)
}

/// Gives a buffer back. One that holds bytes is the caller's to keep; one
/// grown for a big head goes back to the allocator.
pub fn give(b: BytesMut) {
    if b.is_empty() {
        keep(&FREE, b, 4 * SIZE);
    }
}

/// A write buffer's room when taken: a response's head and first body
/// bytes, or an upstream request's head, fit.
pub const OUT: usize = 1024;

/// A write buffer from the worker's pool, given back (emptied) when
/// dropped: a response's or an upstream request's head costs no
/// allocation. One grown past a few pages goes back to the allocator.
#[derive(Debug)]
pub struct Out(Vec<u8>);

impl Out {
    /// An empty buffer with room for at least `OUT` bytes.
    pub fn take() -> Out {
        Out(reuse(&FREE_OUT, OUT))
    }
}

/// What a per-thread pool keeps: a buffer or list that can be emptied and
/// made room in (`reuse`, `keep`).
pub trait Reusable: Default {
    /// Room for `n` more items.
    fn reserve(&mut self, n: usize);
    /// The items it has room for.
    fn capacity(&self) -> usize;
    fn clear(&mut self);
}

impl<T> Reusable for Vec<T> {
    fn reserve(&mut self, n: usize) {
        Vec::reserve(self, n);
    }
    fn capacity(&self) -> usize {
        Vec::capacity(self)
    }
    fn clear(&mut self) {
        Vec::clear(self);
    }
}

impl Reusable for BytesMut {
    fn reserve(&mut self, n: usize) {
        BytesMut::reserve(self, n);
    }
    fn capacity(&self) -> usize {
        BytesMut::capacity(self)
    }
    fn clear(&mut self) {
        BytesMut::clear(self);
    }
}

/// `B`s kept per thread for reuse (`reuse`, `keep`), reached with
/// `try_with`: one given back while the thread's locals are torn down is
/// dropped, not kept, and one asked for then is new.
pub type Free<B> = std::thread::LocalKey<RefCell<Vec<B>>>;

/// An empty one from `free` (else a new one), with room for `n`.
pub fn reuse<B: Reusable>(free: &'static Free<B>, n: usize) -> B {
    let mut v = free
        .try_with(|f| f.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_default();
    v.reserve(n);
    v
}

/// Gives `v` back to `free`, emptied, unless it never allocated, grew past
/// `most` items (back to the allocator) or `free` holds `KEEP` already.
pub fn keep<B: Reusable>(free: &'static Free<B>, mut v: B, most: usize) {
    if v.capacity() == 0 || v.capacity() > most {
        return;
    }
    v.clear();
    let _ = free.try_with(|f| {
        let mut f = f.borrow_mut();
        if f.len() < KEEP {
            f.push(v);
        }
    });
}

/// A buffer made elsewhere, given to the pool when dropped.
impl From<Vec<u8>> for Out {
    fn from(b: Vec<u8>) -> Out {
        Out(b)
    }
}

impl Clone for Out {
    fn clone(&self) -> Out {
        let mut c = Out::take();
        c.extend_from_slice(&self.0);
        c
    }
}

impl std::ops::Deref for Out {
    type Target = Vec<u8>;
    fn deref(&self) -> &Vec<u8> {
        &self.0
    }
}

impl std::ops::DerefMut for Out {
    fn deref_mut(&mut self) -> &mut Vec<u8> {
        &mut self.0
    }
}

impl Drop for Out {
    fn drop(&mut self) {
        keep(&FREE_OUT, std::mem::take(&mut self.0), 4 * SIZE);
    }
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
        let mut a = Out::take();
        assert!(a.capacity() >= OUT);
        a.extend_from_slice(b"written");
        let ptr = a.as_ptr();
        drop(a);
        let b = Out::take();
        assert!(b.is_empty(), "given back emptied");
        assert_eq!(b.as_ptr(), ptr, "taken again");
        let kept = || FREE_OUT.with(|f| f.borrow().len());
        let before = kept();
        let mut big = b;
        big.reserve(8 * SIZE);
        drop(big);
        assert_eq!(kept(), before, "a grown one is not kept");
        drop(Out::take());
        assert_eq!(kept(), before + 1, "one of the usual size is");
        let mut c = Out::take();
        c.extend_from_slice(b"abc");
        assert_eq!(&c.clone()[..], b"abc");
    }
}
