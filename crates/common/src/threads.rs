//! Work spread over scoped threads ([`on_threads`]): one item per thread, results in item order,
//! a panic an internal error.

use crate::error::{Result, SluiceError};

/// Runs `work(p, item)` on every item at once: the first item on the calling thread, each other
/// item on a scoped thread of its own. Returns the results in item order; a thread that panics
/// gives an internal error with the message `panicked`. One item runs on the calling thread
/// without starting any thread.
pub fn on_threads<I, T, F>(items: I, panicked: &str, work: F) -> Vec<Result<T>>
where
    I: IntoIterator,
    I::IntoIter: ExactSizeIterator,
    I::Item: Send,
    T: Send,
    F: Fn(usize, I::Item) -> Result<T> + Sync,
{
    let mut items = items.into_iter().enumerate();
    let n = items.len();
    let Some((_, first)) = items.next() else {
        return Vec::new();
    };
    if n == 1 {
        return vec![work(0, first)];
    }
    std::thread::scope(|scope| {
        let work = &work;
        let handles: Vec<_> = items
            .map(|(p, item)| scope.spawn(move || work(p, item)))
            .collect();
        let mut out = Vec::with_capacity(n);
        out.push(work(0, first));
        out.extend(handles.into_iter().map(|h| {
            h.join()
                .unwrap_or_else(|_| Err(SluiceError::internal(panicked)))
        }));
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_keep_the_item_order_and_report_a_panic() {
        let out = on_threads(vec![10, 20, 30, 40], "boom", |p, x| {
            if x == 30 {
                panic!("a partition fails");
            }
            Ok((p, x))
        });
        assert_eq!(out.len(), 4);
        assert_eq!(out[0].as_ref().unwrap(), &(0, 10));
        assert_eq!(out[1].as_ref().unwrap(), &(1, 20));
        assert!(out[2].as_ref().unwrap_err().to_string().contains("boom"));
        assert_eq!(out[3].as_ref().unwrap(), &(3, 40));
        assert!(on_threads(Vec::<u8>::new(), "boom", |_, x| Ok(x)).is_empty());
    }
}
