//! CPU work spread over the machine's cores: parsing manifests, writing YAML.

use std::sync::OnceLock;

/// Worker threads for CPU work: one per core, at most 8. Read once: the standard library
/// reads the cgroup's CPU quota files on every call.
pub fn threads() -> usize {
    static THREADS: OnceLock<usize> = OnceLock::new();
    *THREADS.get_or_init(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .min(8)
    })
}

/// `work` over `items` cut into one run per core, results in order; a run whose thread
/// panicked is `None`. Fewer than `min` items, or one core, run on the calling thread.
pub fn map_runs<T: Sync, R: Send>(
    items: &[T],
    min: usize,
    work: impl Fn(&[T]) -> R + Sync,
) -> Vec<Option<R>> {
    let threads = threads();
    if items.len() < min.max(1) || threads < 2 {
        return vec![Some(work(items))];
    }
    let per_thread = items.len().div_ceil(threads);
    let work = &work;
    std::thread::scope(|scope| {
        let handles: Vec<_> = items
            .chunks(per_thread)
            .map(|run| scope.spawn(move || work(run)))
            .collect();
        handles.into_iter().map(|h| h.join().ok()).collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_keep_their_order_and_a_panicked_run_is_none() {
        let items: Vec<usize> = (0..1000).collect();
        let sums: Vec<usize> = map_runs(&items, 64, |run| run.iter().sum())
            .into_iter()
            .map(Option::unwrap)
            .collect();
        assert_eq!(sums.iter().sum::<usize>(), items.iter().sum::<usize>());
        let firsts = map_runs(&items, 64, |run| run[0]);
        let firsts: Vec<usize> = firsts.into_iter().map(Option::unwrap).collect();
        assert!(firsts.windows(2).all(|w| w[0] < w[1]), "{firsts:?}");
        assert_eq!(map_runs(&items[..3], 64, |run| run.len()), [Some(3)]);
        if threads() > 1 {
            let runs = map_runs(&items, 64, |run| {
                assert!(run[0] != 0, "the first run fails");
                run.len()
            });
            assert_eq!(runs[0], None);
            assert!(runs[1..].iter().all(Option::is_some));
        }
    }
}
