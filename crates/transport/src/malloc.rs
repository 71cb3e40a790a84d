//! glibc's allocator tuned for the large READ/WRITE buffers.

/// Keep 1 MiB READ/WRITE buffers on the heap. They are above glibc's
/// default mmap threshold, so each would be mmap'd, faulted in page by page,
/// zeroed by the kernel and unmapped again: measured here, that halves
/// encrypted TCP throughput until glibc's dynamic threshold happens to
/// adapt. A fixed threshold of 32 MiB (glibc's maximum) and a matching trim
/// threshold keep them in the arenas for reuse. Call once at start, before
/// threads spawn.
pub fn keep_large_buffers_on_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt takes no pointers and only changes glibc allocator
    // parameters (rustix has no safe wrapper: it is a libc call, not a
    // system call).
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
    }
}
