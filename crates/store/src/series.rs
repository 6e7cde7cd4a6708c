//! Reading metric series: MLflow's history in pages, and downsampled series
//! for charts. Both read chunk metadata first and decode only the points
//! they need; wide chart reads merge block summaries instead of points.

use std::cmp::Ordering;

use sea_orm::{AccessMode, ConnectionTrait, DatabaseTransaction, IsolationLevel, TransactionTrait};
use trainyard_domain::tracking::Point;

use crate::chunks::{self, BLOCK_POINTS, Block};
use crate::tracking::get;
use crate::{Engine, Store, StoreError};

/// MLflow's order for a history: timestamp, then step, then value.
pub fn history_order(a: &Point, b: &Point) -> Ordering {
    (a.timestamp, a.step)
        .cmp(&(b.timestamp, b.step))
        .then(a.value.total_cmp(&b.value))
}

/// Sorts in MLflow's order and drops exact duplicates, which MLflow refuses
/// to store twice.
fn sort_dedup(points: &mut Vec<Point>) {
    // Histories are mostly logged in order already.
    if !points.is_sorted_by(|a, b| history_order(a, b).is_le()) {
        points.sort_unstable_by(history_order);
    }
    points.dedup_by(|a, b| history_order(a, b) == Ordering::Equal);
}

/// A page of a history, and whether points follow it.
#[derive(Debug, Default)]
pub struct HistoryPage {
    pub points: Vec<Point>,
    pub more: bool,
    /// Points decoded to answer: what the page cost.
    pub read: usize,
}

pub use trainyard_domain::explorer::XAxis;

/// Series read at once by one chart request.
const PARALLEL_SERIES: usize = 4;

/// What a chart asks of one series.
#[derive(Debug, Clone, Copy)]
pub struct SeriesQuery {
    pub axis: XAxis,
    /// Subtracted from timestamps on the relative axis.
    pub origin: i64,
    pub x_min: Option<f64>,
    pub x_max: Option<f64>,
    /// The most buckets to return, at least 1.
    pub budget: usize,
}

/// One bucket: mean x, mean y, min and max of y (None when every value in
/// it is NaN), and how many points it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Bucket {
    pub x: f64,
    pub y: Option<f64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub count: usize,
}

/// A downsampled series.
#[derive(Debug, Clone, PartialEq)]
pub struct Downsampled {
    /// Points stored for the series.
    pub total_points: usize,
    /// Points within the range asked for.
    pub in_range: usize,
    /// True when some buckets were merged from block summaries: their edges
    /// then fall on block boundaries (within half a block of the exact edge).
    pub from_summaries: bool,
    pub buckets: Vec<Bucket>,
}

/// A value and the step it was logged at.
pub type AtStep = (f64, i64);

/// The lowest and highest values of a series, each at the step of the first
/// point logged with it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Extremes {
    pub min: AtStep,
    pub max: AtStep,
}

/// A metric of one run in figures.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricSummary {
    pub run_id: String,
    pub key: String,
    pub last: AtStep,
    /// None when every value is NaN.
    pub extremes: Option<Extremes>,
}

/// A chunk's blocks, each with its x extent on the chart's axis.
type BlockSpans = Vec<(f64, f64, Block)>;

/// A chunk without its points.
#[derive(Debug)]
struct ChunkMeta {
    id: i64,
    count: usize,
    min_step: i64,
    max_step: i64,
    min_timestamp: i64,
    max_timestamp: i64,
    summary: Option<Vec<u8>>,
}

impl SeriesQuery {
    fn x(&self, p: &Point) -> f64 {
        match self.axis {
            XAxis::Step => p.step as f64,
            XAxis::Wall => p.timestamp as f64,
            XAxis::Relative => (p.timestamp - self.origin) as f64,
        }
    }

    fn extent(&self, c: &ChunkMeta) -> (f64, f64) {
        self.span(c.min_step, c.max_step, c.min_timestamp, c.max_timestamp)
    }

    fn span(&self, min_step: i64, max_step: i64, min_ts: i64, max_ts: i64) -> (f64, f64) {
        match self.axis {
            XAxis::Step => (min_step as f64, max_step as f64),
            XAxis::Wall => (min_ts as f64, max_ts as f64),
            XAxis::Relative => ((min_ts - self.origin) as f64, (max_ts - self.origin) as f64),
        }
    }

    fn contains(&self, x: f64) -> bool {
        self.x_min.is_none_or(|lo| x >= lo) && self.x_max.is_none_or(|hi| x <= hi)
    }

    /// Sum of the block's x values on this axis.
    fn block_sum_x(&self, b: &Block) -> f64 {
        match self.axis {
            XAxis::Step => b.sum_step,
            XAxis::Wall => b.sum_timestamp,
            XAxis::Relative => b.sum_timestamp - self.origin as f64 * b.count as f64,
        }
    }
}

/// Running sums of one bucket.
#[derive(Clone, Copy)]
struct Acc {
    n: usize,
    sum_x: f64,
    finite: usize,
    sum_y: f64,
    min: f64,
    max: f64,
}

impl Acc {
    const EMPTY: Acc = Acc {
        n: 0,
        sum_x: 0.0,
        finite: 0,
        sum_y: 0.0,
        min: f64::INFINITY,
        max: f64::NEG_INFINITY,
    };

    fn bucket(&self) -> Bucket {
        let has = self.finite > 0;
        Bucket {
            x: self.sum_x / self.n as f64,
            y: has.then(|| self.sum_y / self.finite as f64),
            min: has.then_some(self.min),
            max: has.then_some(self.max),
            count: self.n,
        }
    }
}

/// Equal-width buckets over `[lo, hi]`.
struct Grid {
    lo: f64,
    width: f64,
    acc: Vec<Acc>,
}

impl Grid {
    fn new(lo: f64, hi: f64, budget: usize) -> Grid {
        Grid {
            lo,
            width: (hi - lo) / budget as f64,
            acc: vec![Acc::EMPTY; budget],
        }
    }

    fn index(&self, x: f64) -> usize {
        if self.width > 0.0 {
            (((x - self.lo) / self.width) as usize).min(self.acc.len() - 1)
        } else {
            0
        }
    }

    fn add_point(&mut self, x: f64, y: f64) {
        let i = self.index(x);
        let a = &mut self.acc[i];
        a.n += 1;
        a.sum_x += x;
        if !y.is_nan() {
            a.finite += 1;
            a.sum_y += y;
            a.min = a.min.min(y);
            a.max = a.max.max(y);
        }
    }

    /// A block goes whole into the bucket of its middle.
    fn add_block(&mut self, mid: f64, sum_x: f64, b: &Block) {
        let i = self.index(mid);
        let a = &mut self.acc[i];
        a.n += b.count as usize;
        a.sum_x += sum_x;
        if b.finite > 0 {
            a.finite += b.finite as usize;
            a.sum_y += b.sum;
            a.min = a.min.min(b.min);
            a.max = a.max.max(b.max);
        }
    }

    fn buckets(&self) -> Vec<Bucket> {
        self.acc
            .iter()
            .filter(|a| a.n > 0)
            .map(Acc::bucket)
            .collect()
    }
}

/// Downsamples points (any order) into at most `budget` equal-width buckets
/// over their x extent. With no more points than the budget, each point is
/// its own bucket, in x order. NaN values count but stay out of the mean,
/// min and max.
pub fn downsample(xy: &mut [(f64, f64)], budget: usize) -> Vec<Bucket> {
    if xy.len() <= budget {
        xy.sort_by(|a, b| a.0.total_cmp(&b.0));
        return xy
            .iter()
            .map(|&(x, y)| {
                let v = (!y.is_nan()).then_some(y);
                Bucket {
                    x,
                    y: v,
                    min: v,
                    max: v,
                    count: 1,
                }
            })
            .collect();
    }
    let (lo, hi) = xy
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), p| {
            (lo.min(p.0), hi.max(p.0))
        });
    let mut grid = Grid::new(lo, hi, budget);
    for &(x, y) in xy.iter() {
        grid.add_point(x, y);
    }
    grid.buckets()
}

impl Store {
    /// A read-only transaction that sees one state of the database across
    /// its statements, so a compaction in between cannot show a point twice
    /// or not at all. (SQLite's transactions are snapshots in WAL mode.)
    async fn read_snapshot(&self) -> Result<DatabaseTransaction, StoreError> {
        Ok(match self.engine() {
            Engine::Sqlite => self.connection().begin().await?,
            Engine::Postgres => {
                self.connection()
                    .begin_with_config(
                        Some(IsolationLevel::RepeatableRead),
                        Some(AccessMode::ReadOnly),
                    )
                    .await?
            }
        })
    }

    async fn chunk_metas(
        &self,
        db: &impl ConnectionTrait,
        run_id: &str,
        key: &str,
        with_summary: bool,
    ) -> Result<Vec<ChunkMeta>, StoreError> {
        let mut sql = self.sql();
        sql.push("SELECT id, count, min_step, max_step, min_timestamp, max_timestamp");
        if with_summary {
            sql.push(", summary");
        }
        sql.push(" FROM metric_chunks WHERE run_id = ")
            .bind(run_id.to_owned())
            .push(" AND key = ")
            .bind(key.to_owned())
            .push(" ORDER BY id");
        let rows = db.query_all_raw(sql.build()).await?;
        rows.iter()
            .map(|row| {
                Ok(ChunkMeta {
                    id: get(row, "id")?,
                    count: get::<i32>(row, "count")? as usize,
                    min_step: get(row, "min_step")?,
                    max_step: get(row, "max_step")?,
                    min_timestamp: get(row, "min_timestamp")?,
                    max_timestamp: get(row, "max_timestamp")?,
                    summary: if with_summary {
                        get(row, "summary")?
                    } else {
                        None
                    },
                })
            })
            .collect()
    }

    /// Decodes the points of the given chunks, in id order, into `out`.
    async fn chunk_points(
        &self,
        db: &impl ConnectionTrait,
        ids: &[i64],
        out: &mut Vec<Point>,
    ) -> Result<(), StoreError> {
        for group in ids.chunks(256) {
            let mut sql = self.sql();
            sql.push("SELECT points FROM metric_chunks WHERE id IN ")
                .bind_list(group.iter().copied())
                .push(" ORDER BY id");
            for row in db.query_all_raw(sql.build()).await? {
                let bytes: Vec<u8> = get(&row, "points")?;
                chunks::decode_into(&bytes, out);
            }
        }
        Ok(())
    }

    /// One page of a series in MLflow's order (timestamp, step, value),
    /// without exact duplicates: the points after `after`, at most `limit`
    /// (all when None). Reads only the chunks that can hold the page.
    pub async fn metric_history_page(
        &self,
        run_id: &str,
        key: &str,
        after: Option<Point>,
        limit: Option<usize>,
    ) -> Result<HistoryPage, StoreError> {
        let db = self.read_snapshot().await?;
        let mut metas = self.chunk_metas(&db, run_id, key, false).await?;
        // A chunk's points lie between (min_timestamp, min_step) and
        // (max_timestamp, max_step) in history order, so a page is cut by
        // step inside one timestamp too (a script that logs every point
        // with one timestamp).
        let first = |c: &ChunkMeta| (c.min_timestamp, c.min_step);
        let at = |p: &Point| (p.timestamp, p.step);
        if let Some(after) = after {
            metas.retain(|c| (c.max_timestamp, c.max_step) >= at(&after));
        }
        metas.sort_by_key(|c| (first(c), c.id));
        let is_after = |p: &Point| after.is_none_or(|a| history_order(p, &a) == Ordering::Greater);
        let Some(limit) = limit else {
            let ids: Vec<i64> = metas.iter().map(|c| c.id).collect();
            let mut points = Vec::new();
            self.chunk_points(&db, &ids, &mut points).await?;
            let read = points.len();
            points.retain(is_after);
            sort_dedup(&mut points);
            return Ok(HistoryPage {
                points,
                more: false,
                read,
            });
        };
        let limit = limit.max(1);
        let mut page: Vec<Point> = Vec::new();
        let mut overflow = false;
        let mut taken = 0;
        let mut read = 0;
        loop {
            // Every point not yet read lies in a chunk that starts at or
            // after the next chunk's start: once the page is full and its
            // last point comes before that, the page is final.
            let settled = page.len() >= limit
                && metas
                    .get(taken)
                    .is_none_or(|next| first(next) > at(&page[limit - 1]));
            if settled || taken == metas.len() {
                let more = overflow || page.len() > limit || taken < metas.len();
                page.truncate(limit);
                return Ok(HistoryPage {
                    points: page,
                    more,
                    read,
                });
            }
            let wanted = limit.saturating_sub(page.len()).max(1);
            let mut ids = Vec::new();
            let mut count = 0;
            while taken < metas.len()
                && (count < wanted
                    || (page.len() >= limit && first(&metas[taken]) <= at(&page[limit - 1])))
            {
                ids.push(metas[taken].id);
                count += metas[taken].count;
                taken += 1;
            }
            let mut fresh = Vec::new();
            self.chunk_points(&db, &ids, &mut fresh).await?;
            read += fresh.len();
            page.extend(fresh.into_iter().filter(is_after));
            sort_dedup(&mut page);
            if page.len() > limit {
                page.truncate(limit);
                overflow = true;
            }
        }
    }

    /// The points of a series whose steps lie in `steps` (inclusive; all
    /// when None), in step order, then timestamp and value, without exact
    /// duplicates. Only chunks whose steps reach the range are read (the
    /// range is in the query); None when those hold more than `max`
    /// points, before any is decoded.
    pub async fn metric_points_in_steps(
        &self,
        run_id: &str,
        key: &str,
        steps: Option<(i64, i64)>,
        max: usize,
    ) -> Result<Option<Vec<Point>>, StoreError> {
        let db = self.read_snapshot().await?;
        let mut sql = self.sql();
        sql.push("SELECT id, count FROM metric_chunks WHERE run_id = ")
            .bind(run_id.to_owned())
            .push(" AND key = ")
            .bind(key.to_owned());
        if let Some((start, end)) = steps {
            sql.push(" AND max_step >= ")
                .bind(start)
                .push(" AND min_step <= ")
                .bind(end);
        }
        sql.push(" ORDER BY id");
        let mut ids = Vec::new();
        let mut total = 0usize;
        for row in db.query_all_raw(sql.build()).await? {
            ids.push(get::<i64>(&row, "id")?);
            total = total.saturating_add(get::<i32>(&row, "count")?.max(0) as usize);
        }
        if total > max {
            return Ok(None);
        }
        let mut points = Vec::with_capacity(total);
        self.chunk_points(&db, &ids, &mut points).await?;
        if let Some((start, end)) = steps {
            points.retain(|p| (start..=end).contains(&p.step));
        }
        points.sort_unstable_by(|a, b| {
            (a.step, a.timestamp)
                .cmp(&(b.step, b.timestamp))
                .then(a.value.total_cmp(&b.value))
        });
        points.dedup_by(|a, b| history_order(a, b) == Ordering::Equal);
        Ok(Some(points))
    }

    /// Every (run, key) series of a chart request, downsampled, in the order
    /// asked: runs, then keys. Series are read a few at a time, each in its
    /// own task, so decoding uses every core. Runs that do not exist are
    /// skipped; the caller checks who may read them.
    pub async fn downsample_many(
        &self,
        run_ids: &[String],
        keys: &[String],
        axis: XAxis,
        x_min: Option<f64>,
        x_max: Option<f64>,
        budget: usize,
    ) -> Result<Vec<(String, String, Downsampled)>, StoreError> {
        use futures::StreamExt;
        let runs = self.load_runs(run_ids).await?;
        let mut wanted = Vec::with_capacity(runs.len() * keys.len());
        for run in &runs {
            let query = SeriesQuery {
                axis,
                origin: run.info.start_time,
                x_min,
                x_max,
                budget,
            };
            for key in keys {
                wanted.push((run.info.run_id.clone(), key.clone(), query));
            }
        }
        let tasks = wanted.into_iter().map(|(run_id, key, query)| {
            let store = self.clone();
            tokio::spawn(async move {
                let series = store.downsample_series(&run_id, &key, query).await;
                (run_id, key, series)
            })
        });
        let mut results = futures::stream::iter(tasks).buffered(PARALLEL_SERIES);
        let mut out = Vec::new();
        while let Some(joined) = results.next().await {
            let (run_id, key, series) = joined
                .map_err(|e| StoreError::Rejected(format!("reading a series failed: {e}")))?;
            out.push((run_id, key, series?));
        }
        Ok(out)
    }

    /// A chart request answered in the explorer's form.
    pub async fn chart_series(
        &self,
        request: &trainyard_domain::explorer::SeriesRequest,
    ) -> Result<Vec<trainyard_domain::explorer::SeriesData>, StoreError> {
        let budget = request.check().map_err(StoreError::Rejected)?;
        let series = self
            .downsample_many(
                &request.run_ids,
                &request.keys,
                request.x_axis,
                request.x_min,
                request.x_max,
                budget,
            )
            .await?;
        let finite = |v: Option<f64>| v.filter(|v| v.is_finite());
        Ok(series
            .into_iter()
            .map(|(run_id, key, s)| trainyard_domain::explorer::SeriesData {
                run_id,
                key,
                total_points: s.total_points,
                in_range: s.in_range,
                x: s.buckets.iter().map(|b| b.x).collect(),
                y: s.buckets.iter().map(|b| finite(b.y)).collect(),
                min: s.buckets.iter().map(|b| finite(b.min)).collect(),
                max: s.buckets.iter().map(|b| finite(b.max)).collect(),
            })
            .collect())
    }

    /// One series downsampled for a chart. Chunks outside the range are
    /// skipped; when buckets span at least two summary blocks, chunks
    /// wholly inside the range contribute their block summaries instead of
    /// their points.
    pub async fn downsample_series(
        &self,
        run_id: &str,
        key: &str,
        q: SeriesQuery,
    ) -> Result<Downsampled, StoreError> {
        let budget = q.budget.max(1);
        let db = self.read_snapshot().await?;
        let metas = self.chunk_metas(&db, run_id, key, true).await?;
        let total_points = metas.iter().map(|c| c.count).sum();
        let mut whole: Vec<&ChunkMeta> = Vec::new();
        let mut partial: Vec<i64> = Vec::new();
        for c in &metas {
            let (lo, hi) = q.extent(c);
            let outside = q.x_min.is_some_and(|m| hi < m) || q.x_max.is_some_and(|m| lo > m);
            if outside {
                continue;
            }
            if q.contains(lo) && q.contains(hi) && c.summary.is_some() {
                whole.push(c);
            } else {
                partial.push(c.id);
            }
        }
        let mut points = Vec::new();
        self.chunk_points(&db, &partial, &mut points).await?;
        let mut xy: Vec<(f64, f64)> = points
            .iter()
            .map(|p| (q.x(p), p.value))
            .filter(|(x, _)| q.contains(*x))
            .collect();
        let whole_count: usize = whole.iter().map(|c| c.count).sum();
        if xy.len() + whole_count < budget * 2 * BLOCK_POINTS {
            // Narrow enough to read every point.
            let ids: Vec<i64> = whole.iter().map(|c| c.id).collect();
            points.clear();
            self.chunk_points(&db, &ids, &mut points).await?;
            xy.extend(points.iter().map(|p| (q.x(p), p.value)));
            let in_range = xy.len();
            return Ok(Downsampled {
                total_points,
                in_range,
                from_summaries: false,
                buckets: downsample(&mut xy, budget),
            });
        }
        // Each whole chunk's blocks with their x extents on this axis.
        let mut blocks: Vec<(i64, BlockSpans)> = Vec::with_capacity(whole.len());
        let mut decoded = Vec::new();
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for &(x, _) in &xy {
            lo = lo.min(x);
            hi = hi.max(x);
        }
        for c in &whole {
            decoded.clear();
            chunks::decode_summary_into(c.summary.as_deref().unwrap_or_default(), &mut decoded);
            let spans = decoded
                .iter()
                .map(|b| {
                    let (l, h) = q.span(b.min_step, b.max_step, b.min_timestamp, b.max_timestamp);
                    lo = lo.min(l);
                    hi = hi.max(h);
                    (l, h, *b)
                })
                .collect();
            blocks.push((c.id, spans));
        }
        let mut grid = Grid::new(lo, hi, budget);
        // A block wider than a bucket (points logged out of order, or far
        // apart) cannot go into one bucket: its chunk is read point by point.
        let mut unsummarized: Vec<i64> = Vec::new();
        let mut summarized = 0;
        for (id, spans) in &blocks {
            if spans.iter().any(|(l, h, _)| h - l > grid.width) {
                unsummarized.push(*id);
                continue;
            }
            for (l, h, b) in spans {
                grid.add_block((l + h) / 2.0, q.block_sum_x(b), b);
                summarized += b.count as usize;
            }
        }
        points.clear();
        self.chunk_points(&db, &unsummarized, &mut points).await?;
        xy.extend(points.iter().map(|p| (q.x(p), p.value)));
        for &(x, y) in &xy {
            grid.add_point(x, y);
        }
        Ok(Downsampled {
            total_points,
            in_range: xy.len() + summarized,
            from_summaries: summarized > 0,
            buckets: grid.buckets(),
        })
    }

    /// The lowest and highest values of one series, each with the step of
    /// the first point logged with it; None when the series is empty or
    /// every value is NaN (±Inf count, as they do in a chart's range).
    /// Reads the chunks' block summaries, then decodes the one block of
    /// points that holds each extreme, so a long series costs its
    /// summaries, not its points.
    pub async fn metric_extremes(
        &self,
        run_id: &str,
        key: &str,
    ) -> Result<Option<Extremes>, StoreError> {
        let db = self.read_snapshot().await?;
        self.extremes_in(&db, run_id, key).await
    }

    async fn extremes_in(
        &self,
        db: &DatabaseTransaction,
        run_id: &str,
        key: &str,
    ) -> Result<Option<Extremes>, StoreError> {
        // The extreme values and where they are: (value, chunk id, block).
        let mut low: Option<(f64, i64, usize)> = None;
        let mut high: Option<(f64, i64, usize)> = None;
        let mut blocks: Vec<Block> = Vec::new();
        for chunk in self.chunk_metas(db, run_id, key, true).await? {
            blocks.clear();
            match &chunk.summary {
                Some(bytes) => chunks::decode_summary_into(bytes, &mut blocks),
                None => {
                    // Written before summaries existed and not filled yet.
                    let mut points = Vec::new();
                    self.chunk_points(db, &[chunk.id], &mut points).await?;
                    blocks.extend(points.chunks(BLOCK_POINTS).map(Block::of));
                }
            }
            for (index, b) in blocks.iter().enumerate().filter(|(_, b)| b.finite > 0) {
                if low.is_none_or(|(v, _, _)| b.min < v) {
                    low = Some((b.min, chunk.id, index));
                }
                if high.is_none_or(|(v, _, _)| b.max > v) {
                    high = Some((b.max, chunk.id, index));
                }
            }
        }
        let (Some(low), Some(high)) = (low, high) else {
            return Ok(None);
        };
        let at_step = async |(value, chunk, block): (f64, i64, usize)| {
            let mut sql = self.sql();
            sql.push("SELECT points FROM metric_chunks WHERE id = ")
                .bind(chunk);
            let Some(row) = db.query_one_raw(sql.build()).await? else {
                return Ok(None);
            };
            let bytes: Vec<u8> = get(&row, "points")?;
            let start = (block * BLOCK_POINTS * chunks::POINT_BYTES).min(bytes.len());
            let end = (start + BLOCK_POINTS * chunks::POINT_BYTES).min(bytes.len());
            let mut points = Vec::with_capacity(BLOCK_POINTS);
            chunks::decode_into(&bytes[start..end], &mut points);
            Ok::<_, StoreError>(
                points
                    .iter()
                    .find(|p| p.value == value)
                    .map(|p| (value, p.step)),
            )
        };
        // A summary that does not match its points (it cannot, short of a
        // damaged row) leaves the figures out rather than failing the page.
        let (Some(min), Some(max)) = (at_step(low).await?, at_step(high).await?) else {
            return Ok(None);
        };
        Ok(Some(Extremes { min, max }))
    }

    /// Each asked metric of each asked run in figures: its latest value (as
    /// MLflow keeps it: the highest step, then the latest time) and its
    /// extremes, with their steps. Series that do not exist are left out;
    /// the caller checks who may read the runs. One snapshot for all.
    pub async fn metric_summaries(
        &self,
        run_ids: &[String],
        keys: &[String],
    ) -> Result<Vec<MetricSummary>, StoreError> {
        let mut out = Vec::new();
        if run_ids.is_empty() || keys.is_empty() {
            return Ok(out);
        }
        let db = self.read_snapshot().await?;
        for run_id in run_ids {
            let mut sql = self.sql();
            sql.push("SELECT key, value, step FROM latest_metrics WHERE run_id = ")
                .bind(run_id.clone())
                .push(" AND key IN ")
                .bind_list(keys.iter().cloned());
            let mut latest = std::collections::HashMap::new();
            for row in db.query_all_raw(sql.build()).await? {
                let key: String = get(&row, "key")?;
                // NaN is kept as NULL.
                let value: Option<f64> = get(&row, "value")?;
                latest.insert(key, (value.unwrap_or(f64::NAN), get::<i64>(&row, "step")?));
            }
            for key in keys {
                let Some(&last) = latest.get(key) else {
                    continue;
                };
                let extremes = self.extremes_in(&db, run_id, key).await?;
                out.push(MetricSummary {
                    run_id: run_id.clone(),
                    key: key.clone(),
                    last,
                    extremes,
                });
            }
        }
        Ok(out)
    }

    /// Computes the summaries of chunks written before summaries existed.
    /// Returns how many chunks it filled.
    pub async fn fill_missing_summaries(&self) -> Result<usize, StoreError> {
        let mut filled = 0;
        loop {
            let _turn = self.write_turn().await;
            let mut sql = self.sql();
            sql.push(
                "SELECT id, points FROM metric_chunks WHERE summary IS NULL ORDER BY id LIMIT 256",
            );
            let rows = self.connection().query_all_raw(sql.build()).await?;
            if rows.is_empty() {
                return Ok(filled);
            }
            for row in &rows {
                let id: i64 = get(row, "id")?;
                let bytes: Vec<u8> = get(row, "points")?;
                let mut points = Vec::new();
                chunks::decode_into(&bytes, &mut points);
                let mut sql = self.sql();
                sql.push("UPDATE metric_chunks SET summary = ")
                    .bind(chunks::summarize(&points))
                    .push(" WHERE id = ")
                    .bind(id);
                self.connection().execute_raw(sql.build()).await?;
                filled += 1;
            }
        }
    }
}
