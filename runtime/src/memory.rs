//! Handing freed heap memory back to the kernel.
//!
//! crr's images link glibc. Its allocator keeps the pages of freed memory in the process unless
//! they sit at the very top of a heap, so a burst that was once held (a flood of active requests
//! cached whole, say) leaves the process at its high-water mark long after the objects are gone:
//! the freed chunks lie between live ones. `malloc_trim(0)` walks every arena and gives back each
//! whole free page, wherever it lies. [`release_freed_memory`] does that on an interval; on a
//! heap with nothing to give back it costs a walk of the free lists (microseconds at crr's idle
//! sizes, a few milliseconds after a flood).
//!
//! On other C libraries (musl, other systems) this does nothing: their allocators return memory
//! on their own terms.

use std::time::Duration;

/// How often [`release_freed_memory`] trims the heap.
pub const RELEASE_INTERVAL: Duration = Duration::from_secs(30);

/// Allocations of at least this many bytes are mapped on their own ([`map_large_allocations`]).
pub const MAP_AT_LEAST: usize = 1 << 20;

/// Gives large allocations their own mappings, returned to the kernel as soon as they are freed.
///
/// glibc maps a block of 128 KiB or more on its own, but once such a block is freed it raises
/// that threshold to the block's size (up to 32 MiB), and the trim threshold to twice that: the
/// next list page of 20 MB then comes from a heap and stays in the process after it is freed,
/// until a trim, beside the next page's. Fixing the threshold (which turns the raising off) keeps
/// every buffer of 1 MiB or more (a list page's body, a fat object's strings) mapped on its own,
/// so a relist costs its largest page at a time and nothing after it.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn map_large_allocations() -> bool {
    // SAFETY: `mallopt` takes no pointers and only sets the allocator's parameters under its
    // lock; glibc documents it as MT-Unsafe only against concurrent `mallopt` calls, and it is
    // called once per process (from `release_freed_memory`) and by this module's tests.
    let threshold = i32::try_from(MAP_AT_LEAST).unwrap_or(i32::MAX);
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, threshold) == 1 }
}

/// Nothing to do on this C library.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn map_large_allocations() -> bool {
    false
}

/// Maps large allocations on their own ([`map_large_allocations`]) and trims the heap every
/// `interval`, for as long as the task runs. Spawn it once per process.
pub async fn release_freed_memory(interval: Duration) {
    let mapped = map_large_allocations();
    tracing::debug!(
        mapped,
        threshold = MAP_AT_LEAST,
        "large allocations mapped on their own"
    );
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick completes at once; a process just started has nothing to give back.
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let released = tokio::task::spawn_blocking(trim).await.unwrap_or(false);
        tracing::trace!(released, "trimmed the heap");
    }
}

/// A `kB` field of `/proc/<process>/status` (`process`: `self` or a pid): `VmRSS`, `VmHWM`,
/// `RssAnon`, ... `None` where the file or the field is missing (not Linux, a process gone).
pub fn process_status_kib(process: &str, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{process}/status")).ok()?;
    status.lines().find_map(|line| {
        let value = line.strip_prefix(field)?.strip_prefix(':')?;
        value.trim().trim_end_matches("kB").trim().parse().ok()
    })
}

/// Gives every whole free page of every arena back to the kernel; true when any was.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn trim() -> bool {
    // SAFETY: `malloc_trim` takes no pointers and only reorganises the allocator's own free
    // lists under its arena locks; glibc documents it as thread-safe (MT-Safe).
    unsafe { libc::malloc_trim(0) == 1 }
}

/// Nothing to do on this C library.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn trim() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resident_kib() -> u64 {
        process_status_kib("self", "VmRSS").expect("a VmRSS line")
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_status_field_is_read_by_its_whole_name() {
        let resident = process_status_kib("self", "VmRSS").expect("VmRSS");
        let peak = process_status_kib("self", "VmHWM").expect("VmHWM");
        assert!(
            resident > 0 && peak >= resident,
            "VmRSS {resident}, VmHWM {peak}"
        );
        // `Rss` is a prefix of `RssAnon` and of other fields, and no field of its own.
        assert_eq!(process_status_kib("self", "Rss"), None);
        assert_eq!(process_status_kib("no-such-process", "VmRSS"), None);
    }

    /// A large buffer freed goes back to the kernel at once, also after an earlier one of its
    /// size was freed (which, by default, moves the next into a heap that keeps it).
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn a_large_buffer_freed_leaves_the_process() {
        assert!(map_large_allocations());
        let page = || std::hint::black_box(vec![7u8; 16 << 20]);
        drop(page());
        let before = resident_kib();
        let held = page();
        let holding = resident_kib();
        drop(held);
        let after = resident_kib();
        assert!(
            holding > before + 12 * 1024,
            "the buffer was not resident: {before} KiB, then {holding} KiB"
        );
        assert!(
            after + 12 * 1024 < holding,
            "RSS went from {holding} KiB to {after} KiB only after freeing 16 MiB"
        );
    }

    /// Freed memory in the middle of the heap goes back to the kernel: a few hundred thousand
    /// small live allocations, every other one freed, leave whole pages free between live ones.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn trimming_returns_pages_freed_between_live_allocations() {
        // 64 MiB in 4 KiB blocks, every fourth one kept: most pages end up wholly free but lie
        // below live blocks, where freeing alone never returns them.
        let mut blocks: Vec<Option<Vec<u8>>> = (0..16_384).map(|_| Some(vec![1u8; 4000])).collect();
        for (index, block) in blocks.iter_mut().enumerate() {
            if index % 4 != 3 {
                *block = None;
            }
        }
        let before = resident_kib();
        assert!(trim(), "malloc_trim gave nothing back");
        let after = resident_kib();
        assert!(
            after + 16 * 1024 < before,
            "RSS went from {before} KiB to {after} KiB only"
        );
        drop(blocks);
    }
}
