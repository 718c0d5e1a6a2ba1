//! Locks that survive a panicking holder. It depends on nothing else here, so every module
//! (`redact` and `error` among them) can take its locks this way.
//!
//! A panic in a user callback (foreach_batch, a listener) must not poison the engine's own state for every later caller: the data behind these locks
//! is valid after any panic (each critical section leaves it consistent), so the guard is taken
//! back from the poison error instead of unwrapping.

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// [`Mutex::lock`], recovering a poisoned lock.
pub trait MutexExt<T: ?Sized> {
    /// The guard, also when an earlier holder panicked.
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> MutexExt<T> for Mutex<T> {
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// [`RwLock::read`]/[`RwLock::write`], recovering a poisoned lock.
pub trait RwLockExt<T: ?Sized> {
    /// A read guard, also when an earlier writer panicked.
    fn read_unpoisoned(&self) -> RwLockReadGuard<'_, T>;
    /// A write guard, also when an earlier writer panicked.
    fn write_unpoisoned(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T: ?Sized> RwLockExt<T> for RwLock<T> {
    fn read_unpoisoned(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(|p| p.into_inner())
    }
    fn write_unpoisoned(&self) -> RwLockWriteGuard<'_, T> {
        self.write().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_holder_does_not_lock_out_later_callers() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let _g = m2.lock().unwrap();
            panic!("holder panics");
        })
        .join();
        assert!(m.is_poisoned());
        *m.lock_unpoisoned() += 1;
        assert_eq!(*m.lock_unpoisoned(), 2);
        let rw = RwLock::new(3);
        *rw.write_unpoisoned() += 1;
        assert_eq!(*rw.read_unpoisoned(), 4);
    }
}
