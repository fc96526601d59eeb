//! "Did you mean …?": the closest of some names to a misspelt one, for the errors of every stage.

/// The candidate closest to `word` by edit distance, if close enough to be a likely typo.
pub(crate) fn closest<'a>(
    word: &str,
    candidates: impl Iterator<Item = &'a str>,
) -> Option<&'a str> {
    let limit = (word.chars().count().max(3)) / 3;
    candidates
        .map(|c| (edit_distance(word, c), c))
        .filter(|(d, _)| *d <= limit.max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::closest;

    #[test]
    fn closest_suggests_typos_only() {
        let names = ["customer_id", "purpose", "period"];
        assert_eq!(
            closest("custmer_id", names.iter().copied()),
            Some("customer_id")
        );
        assert_eq!(closest("perid", names.iter().copied()), Some("period"));
        assert_eq!(closest("amount", names.iter().copied()), None);
    }
}
