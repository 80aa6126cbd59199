//! Cutting a push into `applyWrites` calls the PDS accepts: at most
//! [`MAX_BATCH`] writes, and at most [`MAX_BATCH_BYTES`] of JSON, since the
//! reference PDS refuses a body over 150 KiB with HTTP 413 (sealed chat
//! messages are ~1–2 KiB each, so 200 of them do not fit).

use super::MAX_BATCH;

/// The largest JSON body this client sends in one call: below the
/// reference PDS's 150 KiB limit, with room for the call's envelope.
pub const MAX_BATCH_BYTES: usize = 120 * 1024;

/// Splits `items` into consecutive runs of at most [`MAX_BATCH`] items
/// whose `size`s add up to at most [`MAX_BATCH_BYTES`]. An item larger than
/// the budget on its own still gets a run of its own (the PDS then judges
/// it).
pub fn split<T>(items: &[T], size: impl Fn(&T) -> usize) -> Vec<&[T]> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut bytes = 0;
    for (i, item) in items.iter().enumerate() {
        let n = size(item);
        let full = i - start == MAX_BATCH || bytes + n > MAX_BATCH_BYTES;
        if i > start && full {
            out.push(&items[start..i]);
            start = i;
            bytes = 0;
        }
        bytes += n;
    }
    if start < items.len() {
        out.push(&items[start..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_keep_to_the_count_and_the_byte_budget() {
        let small = vec![10usize; 450];
        let runs = split(&small, |n| *n);
        assert_eq!(
            runs.iter().map(|r| r.len()).collect::<Vec<_>>(),
            [200, 200, 50]
        );

        // 2 KiB each: 60 fit in 120 KiB.
        let big = vec![2048usize; 130];
        let runs = split(&big, |n| *n);
        assert_eq!(
            runs.iter().map(|r| r.len()).collect::<Vec<_>>(),
            [60, 60, 10]
        );
        for r in &runs {
            assert!(r.iter().sum::<usize>() <= MAX_BATCH_BYTES);
        }

        // An oversized item goes alone; nothing is dropped or reordered.
        let mixed = [5, MAX_BATCH_BYTES + 1, 5, 5];
        let runs = split(&mixed, |n| *n);
        assert_eq!(runs, [&[5][..], &[MAX_BATCH_BYTES + 1][..], &[5, 5][..]]);
        assert!(split(&[] as &[usize], |n| *n).is_empty());
    }
}
