//! Series reads: history pages and downsampled charts, checked against a
//! plain computation over every point.

use sea_orm::ConnectionTrait;
use trainyard_domain::tracking::Point;

use crate::series::{Downsampled, SeriesQuery, XAxis, downsample, history_order};
use crate::{MetricIn, NewRun, Store};
use trainyard_test_db::TestDb;

async fn store_with_run() -> (TestDb, Store, String) {
    let db = TestDb::new().await;
    let store = Store::connect(&db.url, 4).await.unwrap();
    store.migrate().await.unwrap();
    let run = store
        .create_run(NewRun {
            experiment_id: 0,
            owner_id: None,
            team_id: None,
            user_id: "alice".into(),
            start_time: Some(1_000_000),
            ..NewRun::default()
        })
        .await
        .unwrap()
        .info
        .run_id;
    (db, store, run)
}

async fn log(store: &Store, run: &str, key: &str, points: &[Point]) {
    for batch in points.chunks(1000) {
        let metrics: Vec<MetricIn> = batch
            .iter()
            .map(|p| MetricIn {
                key: key.to_owned(),
                point: *p,
            })
            .collect();
        store.log_batch(run, &metrics, &[], &[]).await.unwrap();
    }
}

fn query(axis: XAxis, budget: usize) -> SeriesQuery {
    SeriesQuery {
        axis,
        origin: 1_000_000,
        x_min: None,
        x_max: None,
        budget,
    }
}

/// A training-like curve: steps in order, one point a second, a spike.
fn curve(n: i64) -> Vec<Point> {
    (0..n)
        .map(|i| Point {
            step: i,
            timestamp: 1_000_000 + i * 1000,
            value: match i {
                777 => 50.0,
                1234 => f64::NAN,
                _ => 1.0 / (1.0 + i as f64 / 1000.0),
            },
        })
        .collect()
}

/// Points compared bit for bit (NaN equals NaN), without printing millions.
fn same(a: &[Point], b: &[Point]) -> bool {
    let bits = |p: &Point| (p.step, p.timestamp, p.value.to_bits());
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| bits(x) == bits(y))
}

fn sum_counts(d: &Downsampled) -> usize {
    d.buckets.iter().map(|b| b.count).sum()
}

#[tokio::test]
async fn history_pages_read_every_point_once_in_mlflow_order() {
    let (_db, store, run) = store_with_run().await;
    // Out-of-order timestamps across chunks, equal timestamps with different
    // steps, and exact duplicates (MLflow keeps one of each).
    let mut points = Vec::new();
    for i in 0..500i64 {
        points.push(Point {
            step: i % 7,
            timestamp: (i * 7919) % 211,
            value: (i % 13) as f64,
        });
    }
    points.push(points[3]);
    points.push(points[400]);
    for batch in points.chunks(37) {
        log(&store, &run, "loss", batch).await;
    }
    let mut expected = points.clone();
    expected.sort_by(history_order);
    expected.dedup_by(|a, b| history_order(a, b).is_eq());
    assert!(expected.len() < points.len(), "the duplicates are dropped");

    let whole = store
        .metric_history_page(&run, "loss", None, None)
        .await
        .unwrap();
    assert!(same(&whole.points, &expected));
    assert!(!whole.more);

    for limit in [1, 7, 100, 1000] {
        let mut got = Vec::new();
        let mut after = None;
        loop {
            let page = store
                .metric_history_page(&run, "loss", after, Some(limit))
                .await
                .unwrap();
            assert!(page.points.len() <= limit);
            got.extend_from_slice(&page.points);
            if !page.more {
                break;
            }
            after = page.points.last().copied();
        }
        assert!(same(&got, &expected), "pages of {limit}");
    }
}

/// A script that logs every point with one timestamp: a page reads the
/// chunks its steps reach, not the whole series (it once read all of it to
/// cut each page).
#[tokio::test]
async fn history_pages_inside_one_timestamp_read_only_what_they_need() {
    let (_db, store, run) = store_with_run().await;
    let points: Vec<Point> = (0..30_000i64)
        .map(|step| Point {
            step,
            timestamp: 1_700_000_000_000,
            value: step as f64,
        })
        .collect();
    log(&store, &run, "loss", &points).await;
    let limit = 1000;
    let mut got = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .metric_history_page(&run, "loss", after, Some(limit))
            .await
            .unwrap();
        // The page and at most the chunks (of 1,000 logged points) either
        // side of it.
        assert!(page.read <= 3 * limit, "a page read {} points", page.read);
        got.extend_from_slice(&page.points);
        if !page.more {
            break;
        }
        after = page.points.last().copied();
    }
    assert!(same(&got, &points));
}

/// get-history-bulk-interval's read: the step range picks the chunks in the
/// query, so a long series is read only where asked, and the bound counts
/// what the range reaches.
#[tokio::test]
async fn points_in_steps_read_only_the_chunks_the_range_reaches() {
    let (_db, store, run) = store_with_run().await;
    let mut points = curve(30_000);
    // An exact duplicate, and one more point at a step of the range.
    points.push(points[5_500]);
    points.push(Point {
        value: -1.0,
        ..points[5_500]
    });
    log(&store, &run, "loss", &points).await;
    let whole = store
        .metric_points_in_steps(&run, "loss", None, 2_500)
        .await
        .unwrap();
    assert!(whole.is_none(), "30,000 points are past the bound");
    let some = store
        .metric_points_in_steps(&run, "loss", Some((5_000, 5_999)), 2_500)
        .await
        .unwrap()
        .expect("the range reaches two chunks");
    assert_eq!(some.len(), 1_001);
    assert_eq!(some.first().unwrap().step, 5_000);
    assert_eq!(some.last().unwrap().step, 5_999);
    let at = |step| some.iter().filter(|p| p.step == step).count();
    assert_eq!((at(5_500), at(5_501)), (2, 1));
    assert!(some.is_sorted_by_key(|p| p.step));
    let none = store
        .metric_points_in_steps(&run, "loss", Some((40_000, 50_000)), 10)
        .await
        .unwrap();
    assert_eq!(none, Some(Vec::new()));
}

#[tokio::test]
async fn wide_reads_merge_summaries_and_keep_totals_and_extremes() {
    let (_db, store, run) = store_with_run().await;
    let points = curve(20_000);
    log(&store, &run, "loss", &points).await;

    for axis in [XAxis::Step, XAxis::Wall, XAxis::Relative] {
        let d = store
            .downsample_series(&run, "loss", query(axis, 100))
            .await
            .unwrap();
        assert!(
            d.from_summaries,
            "200 points per bucket come from summaries"
        );
        assert_eq!(d.total_points, 20_000);
        assert_eq!(d.in_range, 20_000);
        assert_eq!(sum_counts(&d), 20_000);
        assert!(d.buckets.len() >= 95 && d.buckets.len() <= 100);
        let max = d
            .buckets
            .iter()
            .filter_map(|b| b.max)
            .fold(f64::MIN, f64::max);
        assert_eq!(max, 50.0, "the spike survives");
        let min = d
            .buckets
            .iter()
            .filter_map(|b| b.min)
            .fold(f64::MAX, f64::min);
        assert_eq!(min, 1.0 / (1.0 + 19_999.0 / 1000.0));

        // Against the exact buckets: the same means, within the half-block
        // shift of a bucket edge.
        let mut xy: Vec<(f64, f64)> = points
            .iter()
            .map(|p| {
                let x = match axis {
                    XAxis::Step => p.step as f64,
                    XAxis::Wall => p.timestamp as f64,
                    XAxis::Relative => (p.timestamp - 1_000_000) as f64,
                };
                (x, p.value)
            })
            .collect();
        let exact = downsample(&mut xy, 100);
        assert_eq!(exact.len(), 100);
        let (first_x, last_x) = (d.buckets[0].x, d.buckets.last().unwrap().x);
        assert!(
            (first_x - exact[0].x).abs() <= 32.0 * if axis == XAxis::Step { 1.0 } else { 1000.0 }
        );
        assert!(
            (last_x - exact[99].x).abs() <= 32.0 * if axis == XAxis::Step { 1.0 } else { 1000.0 }
        );
        assert!((d.buckets[50].y.unwrap() - exact[50].y.unwrap()).abs() < 0.01);
    }
}

#[tokio::test]
async fn narrow_ranges_and_out_of_order_points_read_exact_points() {
    let (_db, store, run) = store_with_run().await;
    let points = curve(20_000);
    log(&store, &run, "loss", &points).await;

    // A zoom to 1,000 steps at a budget of 100 reads the points themselves.
    let mut q = query(XAxis::Step, 100);
    q.x_min = Some(5_500.0);
    q.x_max = Some(6_499.0);
    let d = store.downsample_series(&run, "loss", q).await.unwrap();
    assert!(!d.from_summaries);
    assert_eq!(d.in_range, 1000);
    assert!(d.buckets.len() >= 99);
    assert_eq!(sum_counts(&d), 1000);
    assert_eq!(d.buckets[0].x, 5_504.5);

    // A range cutting chunks at both ends: exact counts at the edges.
    let mut q = query(XAxis::Step, 50);
    q.x_min = Some(1_500.0);
    q.x_max = Some(17_499.0);
    let d = store.downsample_series(&run, "loss", q).await.unwrap();
    assert!(d.from_summaries);
    assert_eq!(d.in_range, 16_000);
    assert_eq!(sum_counts(&d), 16_000);
    assert_eq!(d.buckets[0].max.unwrap(), 1.0 / (1.0 + 1_500.0 / 1000.0));

    // Steps logged backwards in one series: blocks wider than a bucket are
    // read point by point, so the answer is the exact one.
    let scrambled: Vec<Point> = (0..20_000i64)
        .map(|i| Point {
            step: if i % 2 == 0 { i } else { 19_999 - i },
            timestamp: 1_000_000 + i,
            value: i as f64,
        })
        .collect();
    log(&store, &run, "acc", &scrambled).await;
    let d = store
        .downsample_series(&run, "acc", query(XAxis::Step, 100))
        .await
        .unwrap();
    assert!(!d.from_summaries);
    let mut xy: Vec<(f64, f64)> = scrambled.iter().map(|p| (p.step as f64, p.value)).collect();
    assert_eq!(d.buckets, downsample(&mut xy, 100));
}

#[tokio::test]
async fn chunks_without_summaries_are_filled_at_migration() {
    let (_db, store, run) = store_with_run().await;
    log(&store, &run, "loss", &curve(5_000)).await;
    let before = store
        .downsample_series(&run, "loss", query(XAxis::Step, 20))
        .await
        .unwrap();
    store
        .connection()
        .execute_unprepared("UPDATE metric_chunks SET summary = NULL")
        .await
        .unwrap();
    let unsummarized = store
        .downsample_series(&run, "loss", query(XAxis::Step, 20))
        .await
        .unwrap();
    assert!(
        !unsummarized.from_summaries,
        "a chunk without a summary is read whole"
    );
    assert_eq!(sum_counts(&unsummarized), 5_000);
    assert_eq!(store.fill_missing_summaries().await.unwrap(), 5);
    assert_eq!(store.migrate().await.unwrap(), Vec::<String>::new());
    let after = store
        .downsample_series(&run, "loss", query(XAxis::Step, 20))
        .await
        .unwrap();
    assert_eq!(after, before);
}

async fn chunk_count(store: &Store, run: &str, key: &str) -> i64 {
    let row = store
        .connection()
        .query_one_raw(sea_orm::Statement::from_string(
            store.connection().get_database_backend(),
            format!(
                "SELECT COUNT(*) AS n FROM metric_chunks WHERE run_id = '{run}' AND key = '{key}'"
            ),
        ))
        .await
        .unwrap()
        .unwrap();
    row.try_get::<i64>("", "n").unwrap()
}

#[tokio::test]
async fn compaction_merges_one_point_writes_and_changes_no_answer() {
    let (_db, store, run) = store_with_run().await;
    // A training loop calling log_metric once per step, and a big batch.
    let points = curve(5_000);
    for p in &points[..300] {
        log(&store, &run, "loss", std::slice::from_ref(p)).await;
    }
    log(&store, &run, "loss", &points[300..]).await;
    assert_eq!(chunk_count(&store, &run, "loss").await, 300 + 5);
    let history = store
        .metric_history_page(&run, "loss", None, None)
        .await
        .unwrap();
    let chart = store
        .downsample_series(&run, "loss", query(XAxis::Step, 40))
        .await
        .unwrap();
    let logged = store.metric_history(&run, "loss").await.unwrap();

    let merged = store.compact_pending().await.unwrap();
    // 300 one-point chunks become one; the batches stay as they were.
    let after = chunk_count(&store, &run, "loss").await;
    assert_eq!(after, 305 - merged as i64);
    assert_eq!(merged, 299);
    assert_eq!(after, 6);
    assert_eq!(
        store.compact_pending().await.unwrap(),
        0,
        "nothing is left to do"
    );
    assert!(
        same(&store.metric_history(&run, "loss").await.unwrap(), &logged),
        "the logged order is kept"
    );
    let history_after = store
        .metric_history_page(&run, "loss", None, None)
        .await
        .unwrap();
    assert!(same(&history_after.points, &history.points));
    let chart_after = store
        .downsample_series(&run, "loss", query(XAxis::Step, 40))
        .await
        .unwrap();
    assert_eq!(chart_after.total_points, chart.total_points);
    assert_eq!(sum_counts(&chart_after), 5_000);
    assert_eq!(chart_after.buckets.len(), chart.buckets.len());

    // Series left small before a restart are found again.
    for p in &points[..3] {
        log(&store, &run, "acc", std::slice::from_ref(p)).await;
    }
    let fresh = Store::connect(&_db.url, 2).await.unwrap();
    assert_eq!(
        fresh.compact_pending().await.unwrap(),
        0,
        "a new store knows nothing yet"
    );
    assert_eq!(fresh.mark_uncompacted().await.unwrap(), 1);
    assert_eq!(fresh.compact_pending().await.unwrap(), 2);
    assert_eq!(chunk_count(&fresh, &run, "acc").await, 1);
}

#[tokio::test]
async fn figures_give_last_min_and_max_with_their_steps_from_summaries() {
    let (_db, store, run) = store_with_run().await;
    // 5,000 points in five chunks: a falling curve with a spike at step 777
    // and a NaN at 1234; then a second low at a later step (the first one
    // logged wins) and the same lowest value again.
    let mut points = curve(5_000);
    points[3_000].value = -2.5;
    points[4_500].value = -2.5;
    log(&store, &run, "loss", &points).await;
    log(
        &store,
        &run,
        "nan_only",
        &[Point {
            step: 3,
            timestamp: 1_000_000,
            value: f64::NAN,
        }],
    )
    .await;

    let want_min = (-2.5, 3_000);
    let want_max = (50.0, 777);
    let extremes = store.metric_extremes(&run, "loss").await.unwrap().unwrap();
    assert_eq!((extremes.min, extremes.max), (want_min, want_max));
    // The same from chunks that have no summary yet.
    store
        .connection()
        .execute_unprepared("UPDATE metric_chunks SET summary = NULL")
        .await
        .unwrap();
    let whole = store.metric_extremes(&run, "loss").await.unwrap().unwrap();
    assert_eq!((whole.min, whole.max), (want_min, want_max));
    assert_eq!(store.metric_extremes(&run, "nan_only").await.unwrap(), None);
    assert_eq!(store.metric_extremes(&run, "absent").await.unwrap(), None);

    let keys = [
        "loss".to_owned(),
        "nan_only".to_owned(),
        "absent".to_owned(),
    ];
    let figures = store
        .metric_summaries(&[run.clone(), "no-such-run".to_owned()], &keys)
        .await
        .unwrap();
    let named: Vec<&str> = figures.iter().map(|f| f.key.as_str()).collect();
    assert!(
        store
            .metric_summaries(std::slice::from_ref(&run), &[])
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        named,
        ["loss", "nan_only"],
        "series that exist, in the order asked"
    );
    let last = points.last().unwrap();
    assert_eq!(figures[0].last, (last.value, last.step));
    assert_eq!(figures[0].extremes.map(|e| e.min), Some(want_min));
    assert!(figures[1].last.0.is_nan() && figures[1].extremes.is_none());
}
