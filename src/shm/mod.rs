//! Shared memory for zones: a `memfd` mapped `MAP_SHARED` by the master
//! before it forks (workers inherit the mapping), or a heap buffer for unit
//! tests. This is the only module with `unsafe` for the mapping: it hands out
//! shared references to `#[repr(C)]` records made only of atomics
//! ([`Shared`]) after checking bounds and alignment. The pid-owned lock and
//! the seqlock built on it are in `lock` and `seqlock`. No other I/O.

pub mod lease;
pub mod lock;
pub mod records;
pub mod seqlock;

use std::marker::PhantomData;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU8, AtomicU16, AtomicU32, AtomicU64};

pub use lease::Lease;
pub use lock::{Guard, PidLock};
pub use seqlock::SeqLock;

/// Records that may live in a shared region.
///
/// # Safety
///
/// Implementors are `#[repr(C)]` and made only of atomics (or arrays and
/// records of them), so that all-zero bytes are a valid value and any process
/// may change any field at any time without undefined behaviour.
#[allow(unsafe_code)]
pub unsafe trait Shared: Sync {}

// SAFETY: atomics are valid when zero and safe to share and mutate.
#[allow(unsafe_code)]
unsafe impl Shared for AtomicU8 {}
// SAFETY: as above.
#[allow(unsafe_code)]
unsafe impl Shared for AtomicU16 {}
// SAFETY: as above.
#[allow(unsafe_code)]
unsafe impl Shared for AtomicU32 {}
// SAFETY: as above.
#[allow(unsafe_code)]
unsafe impl Shared for AtomicU64 {}
// SAFETY: as above.
#[allow(unsafe_code)]
unsafe impl Shared for AtomicI64 {}
// SAFETY: an array of shared records is itself one.
#[allow(unsafe_code)]
unsafe impl<T: Shared, const N: usize> Shared for [T; N] {}

#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    #[error("memfd_create() failed ({})", errno(*.0))]
    Create(nix::Error),
    #[error("ftruncate() failed ({})", errno(*.0))]
    Size(nix::Error),
    #[error("mmap() failed ({})", errno(*.0))]
    Map(nix::Error),
    #[error("offset {offset} size {size} is outside the zone of {len} bytes")]
    OutOfBounds {
        offset: usize,
        size: usize,
        len: usize,
    },
    #[error("offset {offset} is not aligned for its record")]
    Misaligned { offset: usize },
    #[error("the zone's layout is not this binary's")]
    Layout,
}

/// `12: Cannot allocate memory`, as nginx prints an errno.
fn errno(e: nix::Error) -> String {
    format!("{}: {}", e as i32, e.desc())
}

enum Backing {
    Mapped { _map: memmap2::MmapRaw, fd: OwnedFd },
    // Owns the memory `base` points into.
    Heap(#[allow(dead_code)] Box<[AtomicU64]>),
}

/// A shared region: a mapped memfd, or heap memory in tests.
pub struct Region {
    backing: Backing,
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the region only ever hands out shared references to `Shared`
// records (atomics), which are `Sync`; the base pointer stays valid for the
// region's life.
#[allow(unsafe_code)]
unsafe impl Send for Region {}
// SAFETY: as above.
#[allow(unsafe_code)]
unsafe impl Sync for Region {}

impl Region {
    /// A new zero-filled memfd of `len` bytes, mapped shared. The memfd is
    /// kept (a binary upgrade passes it on).
    /// Nothing is written: the pages cost memory only once they are used.
    pub fn create(name: &str, len: usize) -> Result<Region, ShmError> {
        use nix::sys::memfd::{MFdFlags, memfd_create};
        let fd = memfd_create(format!("sluice:{name}").as_str(), MFdFlags::MFD_CLOEXEC)
            .map_err(ShmError::Create)?;
        let len_off = i64::try_from(len).map_err(|_| ShmError::Size(nix::Error::EFBIG))?;
        nix::unistd::ftruncate(&fd, len_off).map_err(ShmError::Size)?;
        Region::map(fd, len)
    }

    fn map(fd: OwnedFd, len: usize) -> Result<Region, ShmError> {
        let map = memmap2::MmapOptions::new()
            .len(len)
            .map_raw(&fd)
            .map_err(|e| {
                ShmError::Map(nix::Error::from_raw(
                    e.raw_os_error().unwrap_or(nix::libc::EINVAL),
                ))
            })?;
        let base = NonNull::new(map.as_mut_ptr()).ok_or(ShmError::OutOfBounds {
            offset: 0,
            size: 0,
            len,
        })?;
        Ok(Region {
            backing: Backing::Mapped { _map: map, fd },
            base,
            len,
        })
    }

    /// Maps a memfd another process made (a binary upgrade passes it on).
    pub fn from_fd(fd: OwnedFd) -> Result<Region, ShmError> {
        let len = nix::sys::stat::fstat(&fd).map_err(ShmError::Size)?.st_size as usize;
        Region::map(fd, len)
    }

    /// Zero-filled process-private memory with the same interface.
    pub fn heap(len: usize) -> Region {
        let words: Box<[AtomicU64]> = (0..len.div_ceil(8)).map(|_| AtomicU64::new(0)).collect();
        // A boxed slice's pointer is never null (dangling-but-aligned when empty).
        let base = NonNull::from(&words[..]).cast::<u8>();
        Region {
            backing: Backing::Heap(words),
            base,
            len,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The memfd behind a mapped region.
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        match &self.backing {
            Backing::Mapped { fd, .. } => Some(fd.as_fd()),
            Backing::Heap(_) => None,
        }
    }

    fn check<T>(&self, offset: usize, count: usize) -> Result<(), ShmError> {
        let size = std::mem::size_of::<T>().saturating_mul(count);
        if offset.checked_add(size).is_none_or(|end| end > self.len) {
            return Err(ShmError::OutOfBounds {
                offset,
                size,
                len: self.len,
            });
        }
        if !(self.base.as_ptr() as usize + offset).is_multiple_of(std::mem::align_of::<T>()) {
            return Err(ShmError::Misaligned { offset });
        }
        Ok(())
    }

    /// Fails unless `len` bytes from `offset` are inside the region.
    pub fn check_span(&self, offset: usize, len: usize) -> Result<(), ShmError> {
        self.check::<u8>(offset, len)
    }

    /// The record at `offset`.
    #[allow(unsafe_code)]
    pub fn get<T: Shared>(&self, offset: usize) -> Result<&T, ShmError> {
        self.check::<T>(offset, 1)?;
        // SAFETY: in bounds and aligned (checked above); T is made of atomics,
        // valid for any bytes another process may have written, and only
        // shared references are created.
        Ok(unsafe { &*(self.base.as_ptr().add(offset) as *const T) })
    }

    /// `count` records from `offset`.
    #[allow(unsafe_code)]
    pub fn slice<T: Shared>(&self, offset: usize, count: usize) -> Result<&[T], ShmError> {
        self.check::<T>(offset, count)?;
        // SAFETY: as in `get`, for `count` consecutive records.
        Ok(
            unsafe {
                std::slice::from_raw_parts(self.base.as_ptr().add(offset) as *const T, count)
            },
        )
    }
}

/// A record in a region, kept alive with it: what a worker's snapshot holds
/// for each peer's live state.
pub struct Ref<T> {
    region: Arc<Region>,
    offset: usize,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for Ref<T> {
    fn clone(&self) -> Self {
        Ref {
            region: self.region.clone(),
            offset: self.offset,
            _t: PhantomData,
        }
    }
}

impl<T: Shared> Ref<T> {
    pub fn new(region: &Arc<Region>, offset: usize) -> Result<Ref<T>, ShmError> {
        region.check::<T>(offset, 1)?;
        Ok(Ref {
            region: region.clone(),
            offset,
            _t: PhantomData,
        })
    }
}

impl<T: Shared> std::ops::Deref for Ref<T> {
    type Target = T;
    #[allow(unsafe_code)]
    fn deref(&self) -> &T {
        // SAFETY: bounds and alignment were checked in `new`; the Arc keeps
        // the region mapped; T is made of atomics (see `Region::get`).
        unsafe { &*(self.region.base.as_ptr().add(self.offset) as *const T) }
    }
}

impl<T> std::fmt::Debug for Ref<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Ref@{}", self.offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn views_are_bounded_and_aligned() {
        let r = Region::heap(64);
        assert!(r.get::<AtomicU64>(56).is_ok());
        assert!(matches!(
            r.get::<AtomicU64>(60),
            Err(ShmError::OutOfBounds { .. })
        ));
        assert!(matches!(
            r.get::<AtomicU64>(4),
            Err(ShmError::Misaligned { .. })
        ));
        assert_eq!(r.slice::<AtomicU32>(0, 16).map(|s| s.len()).ok(), Some(16));
        assert!(r.slice::<AtomicU32>(8, 15).is_err());
    }

    #[test]
    fn memfd_mapping_is_shared_between_views() {
        let r = Arc::new(Region::create("test", 4096).expect("memfd"));
        assert!(r.fd().is_some());
        let a: Ref<AtomicU64> = Ref::new(&r, 128).expect("ref");
        r.get::<AtomicU64>(128)
            .expect("get")
            .store(7, Ordering::Relaxed);
        assert_eq!(a.load(Ordering::Relaxed), 7);
    }
}
