//! Seeded pseudo-random file content, computable at any offset so writes and
//! the read-back check can produce any chunk independently.

/// SplitMix64 (Steele, Lea, Flood 2014): the 64-bit word number `word` of the
/// stream for `seed`.
fn word(seed: u64, word: u64) -> u64 {
    let mut z = seed.wrapping_add(word.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Fills `buf` with the bytes at `offset..offset + buf.len()` of the content
/// for `seed` (little-endian words, so byte `p` is byte `p % 8` of word `p / 8`).
pub fn fill(buf: &mut [u8], seed: u64, offset: u64) {
    let mut w = offset / 8;
    let mut skip = (offset % 8) as usize;
    let mut pos = 0;
    while pos < buf.len() {
        let bytes = word(seed, w).to_le_bytes();
        let take = (8 - skip).min(buf.len() - pos);
        buf[pos..pos + take].copy_from_slice(&bytes[skip..skip + take]);
        pos += take;
        skip = 0;
        w += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_split_gives_the_same_bytes() {
        let mut whole = vec![0u8; 1000];
        fill(&mut whole, 7, 0);
        for cut in [1usize, 3, 8, 13, 512, 999] {
            let mut a = vec![0u8; cut];
            let mut b = vec![0u8; 1000 - cut];
            fill(&mut a, 7, 0);
            fill(&mut b, 7, cut as u64);
            assert_eq!([a, b].concat(), whole, "cut at {cut}");
        }
    }

    #[test]
    fn seeds_differ_and_content_is_not_trivial() {
        let (mut a, mut b) = (vec![0u8; 4096], vec![0u8; 4096]);
        fill(&mut a, 1, 0);
        fill(&mut b, 2, 0);
        assert_ne!(a, b);
        // Every byte value shows up in 4 KiB of decent pseudo-random data.
        let mut seen = [false; 256];
        a.iter().for_each(|&x| seen[x as usize] = true);
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn first_word_of_seed_zero_is_splitmix64() {
        // SplitMix64 seeded with 0: first output 0xE220A8397B1DCDAF.
        let mut buf = [0u8; 8];
        fill(&mut buf, 0, 0);
        assert_eq!(u64::from_le_bytes(buf), 0xE220_A839_7B1D_CDAF);
    }
}
