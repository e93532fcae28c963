//! Handles (QPNs, CQ numbers) handed out in a cycle, never to two live objects.

/// Hands out numbers from `lo..=hi` in a cycle, skipping those in use: a handle is never
/// given to two live objects, however long the program runs.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ids {
    pub(super) next: u32,
    pub(super) lo: u32,
    pub(super) hi: u32,
}

impl Ids {
    fn after(&self, n: u32) -> u32 {
        if n >= self.hi {
            self.lo
        } else {
            n + 1
        }
    }

    /// The first number from `next` on that is not `in_use`; `None` when all `live` of
    /// them are (the count spares a walk over the whole space to find that out).
    pub(super) fn alloc(&mut self, live: usize, in_use: impl Fn(u32) -> bool) -> Option<u32> {
        if live as u64 > u64::from(self.hi - self.lo) {
            return None;
        }
        let mut n = self.next;
        while in_use(n) {
            n = self.after(n);
        }
        self.next = self.after(n);
        Some(n)
    }
}
