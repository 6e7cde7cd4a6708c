//! The scheduler core: given the cluster (nodes and the jobs running on
//! them), the teams (quotas and fair-share weights), recent usage and the
//! pending jobs, one [`schedule`] call decides which jobs start where, which
//! borrowed jobs are preempted, and why every other job waits and where it
//! stands. It does no I/O and keeps no state between calls: the server owns
//! the state and the executors carry out the decision.
//!
//! Rules:
//! - Order: effective priority (the job's priority, plus one level for every
//!   `age_step` waited, so that nothing waits forever behind a stream of
//!   higher-priority work), then fair share (decayed GPU-hours used by the
//!   team over its share, then by the user), then submission time.
//! - Quotas: a team may run up to its quota of GPUs as its own. Beyond it, a
//!   job runs only on idle GPUs, as *borrowed* capacity. Which of a team's
//!   jobs are borrowed is derived each cycle: its jobs that may not be
//!   preempted, then its earliest-started, fill the quota; the rest are
//!   borrowed. A team without a quota (0, the default) borrows everything
//!   it runs: with no quotas anywhere the queue is plain fair share.
//! - A job that may not be preempted never borrows: it starts only within
//!   its team's quota.
//! - Preemption: a job whose team is within its quota and that finds no room
//!   may preempt borrowed jobs of teams over their quota (whole jobs, to be
//!   requeued), on the one node where that frees enough for it at the least
//!   cost.
//! - Placement: whole jobs on one node (best fit: the node left with the
//!   fewest free GPUs), lowest free GPU indices first.
//! - No starvation: the first job in order that does not fit for lack of
//!   room holds the node closest to fitting it; later jobs may not start
//!   there, so it drains for the held job as jobs end (every job has a
//!   maximum runtime). A later job may still start there if it cannot
//!   delay the held job (backfill, as Slurm's): it takes none of what the
//!   held job waits for (of each resource it asks none, or leaves the held
//!   job's whole request free already); or, from the running jobs' maximum
//!   runtimes, the held job's latest start (its shadow time) is known and
//!   the later job ends before it, or takes only what will be left over
//!   beside the held job then (a CPU job beside a node held for GPUs).

use std::collections::{BTreeSet, HashMap};
use std::fmt;

pub type JobId = u64;
pub type NodeId = u32;
pub type TeamId = u32;
pub type UserId = u32;

/// What a job asks for. CPUs in thousandths, memory in MiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Resources {
    pub gpus: u32,
    pub cpu_millis: u32,
    pub memory_mib: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub id: NodeId,
    pub name: String,
    /// GPUs are numbered `0..gpus`.
    pub gpus: u32,
    pub cpu_millis: u32,
    pub memory_mib: u64,
    /// Cordoned nodes keep their jobs but take no new ones.
    pub schedulable: bool,
}

impl Node {
    /// Whether the node, empty, would hold `r`.
    pub fn holds(&self, r: &Resources) -> bool {
        self.gpus >= r.gpus && self.cpu_millis >= r.cpu_millis && self.memory_mib >= r.memory_mib
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Team {
    pub id: TeamId,
    pub name: String,
    /// GPUs the team may always use.
    pub quota_gpus: u32,
    /// Fair-share weight (> 0): usage is divided by it.
    pub share: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PendingJob {
    pub id: JobId,
    pub team: TeamId,
    pub user: UserId,
    pub priority: i32,
    /// Milliseconds since the Unix epoch.
    pub submitted_at: i64,
    pub resources: Resources,
    /// Its maximum runtime, where it has one: it ends within it.
    pub max_runtime_ms: Option<i64>,
    /// May run beyond its team's quota on borrowed GPUs (and so be
    /// preempted). False: it waits for the team's own GPUs.
    pub borrow: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RunningJob {
    pub id: JobId,
    pub team: TeamId,
    pub user: UserId,
    pub priority: i32,
    pub started_at: i64,
    /// When it is stopped at the latest (its maximum runtime), if known.
    pub ends_by: Option<i64>,
    pub node: NodeId,
    /// GPU indices on the node.
    pub gpus: Vec<u32>,
    pub resources: Resources,
    /// False for a job that may not be preempted: it counts first
    /// against its team's quota.
    pub preemptible: bool,
    /// Already asked to stop for a preemption: what it holds is counted as
    /// coming free (for the next cycles' plans), and it is not chosen again.
    pub preempting: bool,
}

/// Decayed GPU-hours over the fair-share window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Usage {
    pub team_gpu_hours: HashMap<TeamId, f64>,
    pub user_gpu_hours: HashMap<UserId, f64>,
}

impl Usage {
    /// Adds `gpu_hours` that ended `age_hours` ago, decayed with `half_life_hours`.
    pub fn add(
        &mut self,
        team: TeamId,
        user: UserId,
        gpu_hours: f64,
        age_hours: f64,
        half_life_hours: f64,
    ) {
        let weight = 0.5f64.powf(age_hours.max(0.0) / half_life_hours.max(f64::MIN_POSITIVE));
        *self.team_gpu_hours.entry(team).or_default() += gpu_hours * weight;
        *self.user_gpu_hours.entry(user).or_default() += gpu_hours * weight;
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// Waiting this long raises a job's priority by one level.
    pub age_step_ms: i64,
    /// Allow teams over quota to use idle GPUs.
    pub borrowing: bool,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            age_step_ms: 60 * 60 * 1000,
            borrowing: true,
        }
    }
}

/// Everything one cycle looks at.
#[derive(Debug, Clone, Default)]
pub struct State {
    pub now: i64,
    pub nodes: Vec<Node>,
    pub teams: Vec<Team>,
    pub running: Vec<RunningJob>,
    pub pending: Vec<PendingJob>,
    pub usage: Usage,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    pub job: JobId,
    pub node: NodeId,
    pub gpus: Vec<u32>,
    /// Started on idle GPUs beyond the team's quota: may be preempted.
    pub borrowed: bool,
}

/// Why a job is not starting now.
#[derive(Debug, Clone, PartialEq)]
pub enum Reason {
    /// Asks for more than any node has: it can never run.
    NeverFits { gpus: u32, largest_node: u32 },
    /// Only nodes that take no new jobs now (drained, cordoned, not Ready)
    /// are big enough: `nodes` names the first few, `more` the others.
    Closed { nodes: Vec<String>, more: usize },
    /// The team is at its quota and borrowing found nothing idle.
    Quota {
        team: String,
        in_use: u32,
        quota: u32,
    },
    /// The job may not be preempted, so it waits for its team's own GPUs
    /// (`asks` of them: more than the guarantee, it waits until an admin
    /// raises it).
    OwnGpusOnly {
        team: String,
        in_use: u32,
        quota: u32,
        asks: u32,
    },
    /// No node has the GPUs free.
    NoRoom { gpus: u32, largest_free: u32 },
    /// Nodes with the GPUs free lack CPU or memory.
    NoCpuOrMemory {
        gpus: u32,
        cpu_millis: u32,
        memory_mib: u64,
    },
    /// Borrowed jobs are being stopped to make room for it.
    Preempting { node: String, jobs: usize },
    /// A job ahead of it holds the only nodes where it would fit.
    HeldFor { job: JobId, node: String },
}

/// "1 GPU", "2 GPUs"; with an adjective between: "1 free GPU".
pub fn gpus_text(n: u32, adjective: &str) -> String {
    let unit = if n == 1 { "GPU" } else { "GPUs" };
    if adjective.is_empty() {
        format!("{n} {unit}")
    } else {
        format!("{n} {adjective} {unit}")
    }
}

/// "1 CPU", "2.5 CPUs".
fn cpus_text(millis: u32) -> String {
    let cpus = millis as f64 / 1000.0;
    if millis == 1000 {
        "1 CPU".to_owned()
    } else {
        format!("{cpus} CPUs")
    }
}

/// "512 MiB", "1.5 GiB".
fn memory_text(mib: u64) -> String {
    if mib >= 1024 {
        let gib = mib as f64 / 1024.0;
        if mib.is_multiple_of(1024) {
            format!("{} GiB", mib / 1024)
        } else {
            format!("{gib:.1} GiB")
        }
    } else {
        format!("{mib} MiB")
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::NeverFits { gpus, largest_node } => write!(
                f,
                "needs {} on one node; the largest node has {largest_node}",
                gpus_text(*gpus, "")
            ),
            Reason::Closed { nodes, more } => {
                let named = match (nodes.as_slice(), more) {
                    ([one], 0) => format!("{one}, the only node it fits on, takes"),
                    (names, 0) => format!(
                        "the {} nodes it fits on ({}) take",
                        names.len(),
                        names.join(", ")
                    ),
                    (names, more) => format!(
                        "the {} nodes it fits on ({} and {more} more) take",
                        names.len() + more,
                        names.join(", ")
                    ),
                };
                write!(f, "{named} no new jobs now")
            }
            Reason::Quota {
                team,
                in_use,
                quota,
            } => write!(
                f,
                "team {team}: {in_use} of {} in use; waiting for idle GPUs to borrow",
                gpus_text(*quota, "guaranteed")
            ),
            Reason::OwnGpusOnly {
                team, asks, quota, ..
            } if asks > quota => write!(
                f,
                "team {team}: this job may not be preempted, so it runs only on the team's own GPUs, and it asks for {asks} of {}: it starts only once an admin raises the team's guarantee (or it is moved to another team)",
                gpus_text(*quota, "guaranteed")
            ),
            Reason::OwnGpusOnly {
                team,
                in_use,
                quota,
                ..
            } => write!(
                f,
                "team {team}: {in_use} of {} in use; this job may not be preempted, so it runs only on the team's own GPUs",
                gpus_text(*quota, "guaranteed")
            ),
            Reason::NoRoom { gpus, largest_free } => write!(
                f,
                "no node has {}; largest free block is {largest_free}",
                gpus_text(*gpus, "free")
            ),
            Reason::NoCpuOrMemory {
                gpus,
                cpu_millis,
                memory_mib,
            } => write!(
                f,
                "no node with {} also has {} and {} of memory free",
                gpus_text(*gpus, "free"),
                cpus_text(*cpu_millis),
                memory_text(*memory_mib)
            ),
            Reason::Preempting { node, jobs } => write!(
                f,
                "stopping {jobs} borrowed {} on {node} to give the team its guaranteed GPUs",
                if *jobs == 1 { "job" } else { "jobs" }
            ),
            Reason::HeldFor { job, node } => write!(
                f,
                "what frees up on {node} is kept for job {job}, which is ahead in the queue"
            ),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Waiting {
    pub job: JobId,
    /// 1-based place in the queue order.
    pub position: usize,
    pub reason: Reason,
}

/// A borrowed job to stop and requeue, and who needs its GPUs back.
#[derive(Debug, Clone, PartialEq)]
pub struct Preemption {
    pub job: JobId,
    /// The waiting job the GPUs go to.
    pub for_job: JobId,
    /// Its team, that team's quota, and the GPUs it needs.
    pub team: String,
    pub quota: u32,
    pub gpus: u32,
}

impl fmt::Display for Preemption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "preempted: team {} is within its quota of {} and needs {} (job {})",
            self.team,
            gpus_text(self.quota, ""),
            self.gpus,
            self.for_job
        )
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Decision {
    pub starts: Vec<Placement>,
    /// Running jobs to stop and requeue.
    pub preempt: Vec<Preemption>,
    /// Every pending job that does not start, in queue order.
    pub waiting: Vec<Waiting>,
}

/// Checks a request against the cluster at submission: a job that can never
/// run is refused with the reason instead of waiting forever.
pub fn admissible(nodes: &[Node], resources: &Resources) -> Result<(), Reason> {
    let largest = nodes.iter().map(|n| n.gpus).max().unwrap_or(0);
    let fits = nodes.iter().any(|n| {
        n.gpus >= resources.gpus
            && n.cpu_millis >= resources.cpu_millis
            && n.memory_mib >= resources.memory_mib
    });
    if fits {
        Ok(())
    } else {
        Err(Reason::NeverFits {
            gpus: resources.gpus,
            largest_node: largest,
        })
    }
}

/// Free capacity of one node during a cycle.
#[derive(Debug, Clone)]
struct Free {
    gpus: Vec<bool>,
    free_gpus: u32,
    cpu_millis: u32,
    memory_mib: u64,
    schedulable: bool,
    held_by: Option<Hold>,
}

/// A node kept draining for a job ahead in the queue. A hold for a job
/// that would borrow gives way to jobs within their team's quota.
#[derive(Debug, Clone, Copy)]
struct Hold {
    job: JobId,
    borrower: bool,
    /// What the held job asks for: a later job may still start there if
    /// it takes none of what the held job waits for (see
    /// [`Free::leaves_room_for`]).
    needs: Resources,
    /// When it can start at the latest, and what is left beside it then.
    shadow: Option<Shadow>,
}

/// The latest time a held job can start (every job on its node stopped by
/// its maximum runtime, in order, until it fits), and what is free beyond
/// its request then: what a later job may take without delaying it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Shadow {
    at: i64,
    extra: Resources,
}

impl Shadow {
    /// From what is free now and when each job on the node ends at the
    /// latest; None if it never fits that way (a job without a known end
    /// holds what it needs).
    fn of(free: &Free, needs: &Resources, ends: &[(i64, Resources)]) -> Option<Shadow> {
        let mut ends = ends.to_vec();
        ends.sort_by_key(|(at, _)| *at);
        let (mut gpus, mut cpu, mut memory) = (free.free_gpus, free.cpu_millis, free.memory_mib);
        for (at, r) in ends {
            gpus += r.gpus;
            cpu += r.cpu_millis;
            memory += r.memory_mib;
            if gpus >= needs.gpus && cpu >= needs.cpu_millis && memory >= needs.memory_mib {
                return Some(Shadow {
                    at,
                    extra: Resources {
                        gpus: gpus - needs.gpus,
                        cpu_millis: cpu - needs.cpu_millis,
                        memory_mib: memory - needs.memory_mib,
                    },
                });
            }
        }
        None
    }

    /// Whether `r`, a job of `max_runtime_ms` started at `now`, leaves the
    /// held job its start: it ends before the shadow time (strictly: a job
    /// of the same runtime as those the held job waits for, started with
    /// them, would end with them and take what they free), or takes only
    /// what is left over beside the held job then.
    fn spares(&self, r: &Resources, max_runtime_ms: Option<i64>, now: i64) -> bool {
        max_runtime_ms.is_some_and(|ms| now.saturating_add(ms) < self.at)
            || (r.gpus <= self.extra.gpus
                && r.cpu_millis <= self.extra.cpu_millis
                && r.memory_mib <= self.extra.memory_mib)
    }
}

impl Free {
    /// Whether `r`, started here now, takes nothing that the job this node
    /// is held for will need: of each resource it either asks none, or
    /// leaves the held job's whole request free already. What is free only
    /// grows as jobs end, so such a job never delays the held one.
    fn leaves_room_for(&self, r: &Resources, needs: &Resources) -> bool {
        self.fits(r)
            && (r.gpus == 0 || self.free_gpus - r.gpus >= needs.gpus)
            && (r.cpu_millis == 0 || self.cpu_millis - r.cpu_millis >= needs.cpu_millis)
            && (r.memory_mib == 0 || self.memory_mib - r.memory_mib >= needs.memory_mib)
    }

    fn fits(&self, r: &Resources) -> bool {
        self.free_gpus >= r.gpus
            && self.cpu_millis >= r.cpu_millis
            && self.memory_mib >= r.memory_mib
    }

    fn take(&mut self, r: &Resources) -> Vec<u32> {
        let mut picked = Vec::with_capacity(r.gpus as usize);
        for (i, free) in self.gpus.iter_mut().enumerate() {
            if picked.len() == r.gpus as usize {
                break;
            }
            if *free {
                *free = false;
                picked.push(i as u32);
            }
        }
        self.free_gpus -= r.gpus;
        self.cpu_millis -= r.cpu_millis;
        self.memory_mib -= r.memory_mib;
        picked
    }
}

/// Which running jobs are borrowed: per team, the jobs that may not be
/// preempted, then the earliest-started, fill the quota; the rest are
/// borrowed.
pub fn borrowed_jobs(teams: &[Team], running: &[RunningJob]) -> Vec<JobId> {
    // With no guarantee anywhere nothing is ever taken back: nothing is
    // borrowed (what a job's page would say "may be preempted" of).
    if !any_guarantee(teams) {
        return Vec::new();
    }
    let quota: HashMap<TeamId, u32> = teams.iter().map(|t| (t.id, t.quota_gpus)).collect();
    let mut by_team: HashMap<TeamId, Vec<&RunningJob>> = HashMap::new();
    for job in running {
        by_team.entry(job.team).or_default().push(job);
    }
    let mut borrowed = Vec::new();
    for (team, mut jobs) in by_team {
        jobs.sort_by_key(|j| (j.preemptible, j.started_at, j.id));
        let mut owned = 0u32;
        let limit = quota.get(&team).copied().unwrap_or(0);
        for job in jobs {
            // Over the quota only when an admin lowered it: still not
            // preempted, as it was promised.
            if !job.preemptible || owned + job.resources.gpus <= limit {
                owned += job.resources.gpus;
            } else {
                borrowed.push(job.id);
            }
        }
    }
    borrowed
}

/// Whether some team is guaranteed GPUs: only then may a job be preempted.
fn any_guarantee(teams: &[Team]) -> bool {
    teams.iter().any(|t| t.quota_gpus > 0)
}

/// One scheduling cycle.
pub fn schedule(state: &State, policy: &Policy) -> Decision {
    let node_index: HashMap<NodeId, usize> = state
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.id, i))
        .collect();
    let mut free: Vec<Free> = state
        .nodes
        .iter()
        .map(|n| Free {
            gpus: vec![true; n.gpus as usize],
            free_gpus: n.gpus,
            cpu_millis: n.cpu_millis,
            memory_mib: n.memory_mib,
            schedulable: n.schedulable,
            held_by: None,
        })
        .collect();
    for job in &state.running {
        let Some(&i) = node_index.get(&job.node) else {
            continue;
        };
        let f = &mut free[i];
        for &g in &job.gpus {
            if let Some(slot) = f.gpus.get_mut(g as usize)
                && *slot
            {
                *slot = false;
                f.free_gpus -= 1;
            }
        }
        f.cpu_millis = f.cpu_millis.saturating_sub(job.resources.cpu_millis);
        f.memory_mib = f.memory_mib.saturating_sub(job.resources.memory_mib);
    }
    // When what runs on each node ends at the latest; None where a job
    // has no known end (no shadow time there).
    let mut ends: Vec<Option<Vec<(i64, Resources)>>> = vec![Some(Vec::new()); state.nodes.len()];
    for job in &state.running {
        if let Some(&i) = node_index.get(&job.node) {
            match (job.ends_by, &mut ends[i]) {
                (Some(at), Some(list)) => list.push((at, job.resources)),
                _ => ends[i] = None,
            }
        }
    }
    // Best fit: schedulable nodes ordered by free GPUs.
    let mut by_free: BTreeSet<(u32, usize)> = free
        .iter()
        .enumerate()
        .filter(|(_, f)| f.schedulable)
        .map(|(i, f)| (f.free_gpus, i))
        .collect();

    let teams: HashMap<TeamId, &Team> = state.teams.iter().map(|t| (t.id, t)).collect();
    let mut in_use: HashMap<TeamId, u32> = HashMap::new();
    for job in &state.running {
        *in_use.entry(job.team).or_default() += job.resources.gpus;
    }
    let borrowed: Vec<JobId> = borrowed_jobs(&state.teams, &state.running);
    let mut borrowed_on_node: Vec<Vec<&RunningJob>> = vec![Vec::new(); state.nodes.len()];
    // Borrowed jobs already being preempted, per node: what they free.
    let mut stopping: Vec<Stopping> = vec![Stopping::default(); state.nodes.len()];
    {
        let set: std::collections::HashSet<JobId> = borrowed.iter().copied().collect();
        for job in &state.running {
            if set.contains(&job.id)
                && let Some(&i) = node_index.get(&job.node)
            {
                if job.preempting {
                    let s = &mut stopping[i];
                    s.gpus += job.resources.gpus;
                    s.cpu_millis += job.resources.cpu_millis;
                    s.memory_mib += job.resources.memory_mib;
                    s.jobs += 1;
                } else {
                    borrowed_on_node[i].push(job);
                }
            }
        }
    }
    let largest_node = state
        .nodes
        .iter()
        .filter(|n| n.schedulable)
        .map(|n| n.gpus)
        .max()
        .unwrap_or(0);

    let guarantees = any_guarantee(&state.teams);

    let order = queue_order(state, policy, &teams);
    let mut decision = Decision::default();
    let mut preempted: std::collections::HashSet<JobId> = Default::default();
    // Nodes held for a job ahead in the queue (see the crate's rules).
    let mut held_nodes: Vec<usize> = Vec::new();
    // The first job within its quota and the first borrowing job that find
    // no room each hold a node.
    let mut holding_owner = false;
    let mut holding_borrower = false;
    for (position, job) in order.into_iter().enumerate() {
        let position = position + 1;
        let r = &job.resources;
        let wait = |reason: Reason, decision: &mut Decision| {
            decision.waiting.push(Waiting {
                job: job.id,
                position,
                reason,
            });
        };
        // No open node could ever hold it (closed ones may): it waits
        // without holding a node it could never use.
        if !state.nodes.iter().any(|n| n.schedulable && n.holds(r)) {
            wait(closed_or_never(state, r, largest_node), &mut decision);
            continue;
        }
        let team = teams.get(&job.team);
        let team_name = || team.map(|t| t.name.clone()).unwrap_or_default();
        let quota = team.map(|t| t.quota_gpus).unwrap_or(0);
        let used = in_use.get(&job.team).copied().unwrap_or(0);
        // A job of no GPUs takes none of a guarantee, and claims none: it
        // neither takes back borrowed GPUs nor passes a borrower's hold.
        let within_quota = r.gpus == 0 || used + r.gpus <= quota;
        let claims = within_quota && r.gpus > 0;
        if !within_quota && !job.borrow {
            wait(
                Reason::OwnGpusOnly {
                    team: team_name(),
                    in_use: used,
                    quota,
                    asks: r.gpus,
                },
                &mut decision,
            );
            continue;
        }
        let quota_reason = || Reason::Quota {
            team: team_name(),
            in_use: used,
            quota,
        };
        if !within_quota && !policy.borrowing {
            wait(quota_reason(), &mut decision);
            continue;
        }
        // Best fit among nodes not held for another job; a job within its
        // quota may also use nodes held for borrowers.
        let mut chosen = by_free
            .range((r.gpus, 0)..)
            .map(|&(_, i)| i)
            .find(|&i| free[i].held_by.is_none() && free[i].fits(r));
        if claims {
            let yielding = held_nodes
                .iter()
                .copied()
                .filter(|&i| free[i].held_by.is_some_and(|h| h.borrower) && free[i].fits(r))
                .min_by_key(|&i| (free[i].free_gpus, i));
            if let Some(h) = yielding
                && chosen.is_none_or(|c| free[h].free_gpus < free[c].free_gpus)
            {
                chosen = Some(h);
            }
        }
        // Backfill: a node held for another job, where this one cannot
        // delay that job.
        if chosen.is_none() {
            chosen = held_nodes
                .iter()
                .copied()
                .filter(|&i| {
                    free[i].held_by.is_some_and(|h| {
                        h.job != job.id
                            && free[i].fits(r)
                            && (free[i].leaves_room_for(r, &h.needs)
                                || h.shadow
                                    .is_some_and(|s| s.spares(r, job.max_runtime_ms, state.now)))
                    })
                })
                .min_by_key(|&i| (free[i].free_gpus, i));
        }
        if let Some(i) = chosen {
            let listed = by_free.remove(&(free[i].free_gpus, i));
            // What may still run at a held job's shadow time leaves less
            // beside it.
            if let Some(hold) = &mut free[i].held_by
                && let Some(shadow) = &mut hold.shadow
                && job
                    .max_runtime_ms
                    .is_none_or(|ms| state.now.saturating_add(ms) >= shadow.at)
            {
                shadow.extra = Resources {
                    gpus: shadow.extra.gpus.saturating_sub(r.gpus),
                    cpu_millis: shadow.extra.cpu_millis.saturating_sub(r.cpu_millis),
                    memory_mib: shadow.extra.memory_mib.saturating_sub(r.memory_mib),
                };
            }
            match (job.max_runtime_ms, &mut ends[i]) {
                (Some(ms), Some(list)) => list.push((state.now.saturating_add(ms), *r)),
                _ => ends[i] = None,
            }
            let gpus = free[i].take(r);
            if listed {
                by_free.insert((free[i].free_gpus, i));
            }
            *in_use.entry(job.team).or_default() += r.gpus;
            decision.starts.push(Placement {
                job: job.id,
                node: state.nodes[i].id,
                gpus,
                // A job of no GPUs borrows none; with no guarantees
                // anywhere, nothing is borrowed.
                borrowed: !within_quota && r.gpus > 0 && guarantees,
            });
            continue;
        }
        // No room. A job within its quota may take back borrowed GPUs.
        if claims
            && let Some((i, victims)) =
                preemption_plan(r, &free, &borrowed_on_node, &stopping, &preempted, job.team)
        {
            for v in &victims {
                preempted.insert(*v);
                decision.preempt.push(Preemption {
                    job: *v,
                    for_job: job.id,
                    team: team_name(),
                    quota,
                    gpus: r.gpus,
                });
            }
            hold(
                &mut free,
                &mut by_free,
                &mut held_nodes,
                i,
                // Its start is when the preempted jobs stop, not known
                // from runtimes: no backfill beyond what it does not need.
                (job.id, *r, None),
                false,
            );
            *in_use.entry(job.team).or_default() += r.gpus;
            // What is stopping there is this job's now.
            let jobs = victims.len() + std::mem::take(&mut stopping[i]).jobs;
            wait(
                Reason::Preempting {
                    node: state.nodes[i].name.clone(),
                    jobs,
                },
                &mut decision,
            );
            continue;
        }
        // A held node it would fit on: what frees up there is another's.
        let held_for = |free: &[Free]| {
            held_nodes
                .iter()
                .find(|&&i| free[i].fits(r) && free[i].held_by.is_some_and(|h| h.job != job.id))
                .map(|&i| Reason::HeldFor {
                    job: free[i].held_by.map(|h| h.job).unwrap_or_default(),
                    node: state.nodes[i].name.clone(),
                })
        };
        let largest_unheld = by_free.iter().next_back().map_or(0, |&(g, _)| g);
        if !within_quota && quota > 0 && largest_unheld == 0 {
            let reason = held_for(&free).unwrap_or_else(quota_reason);
            wait(reason, &mut decision);
            continue;
        }
        let largest_free = held_nodes
            .iter()
            .map(|&i| free[i].free_gpus)
            .fold(largest_unheld, u32::max);
        let reason = if largest_free >= r.gpus {
            Reason::NoCpuOrMemory {
                gpus: r.gpus,
                cpu_millis: r.cpu_millis,
                memory_mib: r.memory_mib,
            }
        } else {
            Reason::NoRoom {
                gpus: r.gpus,
                largest_free,
            }
        };
        // The first job that lacks room holds the node nearest to fitting
        // it, so that node drains for it; so does the first borrower, on a
        // node that jobs within their quota may still take.
        let first = if claims {
            !std::mem::replace(&mut holding_owner, true)
        } else {
            !std::mem::replace(&mut holding_borrower, true)
        };
        if first {
            if let Some(i) = nearest_node(r, &by_free, &free, &held_nodes, claims) {
                let shadow = ends[i]
                    .as_deref()
                    .and_then(|list| Shadow::of(&free[i], r, list));
                hold(
                    &mut free,
                    &mut by_free,
                    &mut held_nodes,
                    i,
                    (job.id, *r, shadow),
                    !claims,
                );
            }
            wait(reason, &mut decision);
            continue;
        }
        // Would it fit on a held node? Then say so.
        let reason = held_for(&free).unwrap_or(reason);
        wait(reason, &mut decision);
    }
    decision
}

/// Keeps node `i` draining for `job`: off the best-fit list, and its hold
/// taken over from a borrower when there was one.
fn hold(
    free: &mut [Free],
    by_free: &mut BTreeSet<(u32, usize)>,
    held_nodes: &mut Vec<usize>,
    i: usize,
    (job, needs, shadow): (JobId, Resources, Option<Shadow>),
    borrower: bool,
) {
    by_free.remove(&(free[i].free_gpus, i));
    if free[i].held_by.is_none() {
        held_nodes.push(i);
    }
    free[i].held_by = Some(Hold {
        job,
        borrower,
        needs,
        shadow,
    });
}

/// Pending jobs in queue order.
fn queue_order<'a>(
    state: &'a State,
    policy: &Policy,
    teams: &HashMap<TeamId, &Team>,
) -> Vec<&'a PendingJob> {
    let step = policy.age_step_ms.max(1);
    let mut keyed: Vec<(i64, f64, f64, i64, JobId, &PendingJob)> = state
        .pending
        .iter()
        .map(|job| {
            let waited = (state.now - job.submitted_at).max(0);
            let effective = job.priority as i64 + waited / step;
            let share = teams
                .get(&job.team)
                .map(|t| t.share)
                .unwrap_or(1.0)
                .max(1e-9);
            let team_usage = state
                .usage
                .team_gpu_hours
                .get(&job.team)
                .copied()
                .unwrap_or(0.0)
                / share;
            let user_usage = state
                .usage
                .user_gpu_hours
                .get(&job.user)
                .copied()
                .unwrap_or(0.0);
            (
                -effective,
                team_usage,
                user_usage,
                job.submitted_at,
                job.id,
                job,
            )
        })
        .collect();
    keyed.sort_by(|a, b| {
        a.0.cmp(&b.0)
            .then(a.1.total_cmp(&b.1))
            .then(a.2.total_cmp(&b.2))
            .then(a.3.cmp(&b.3))
            .then(a.4.cmp(&b.4))
    });
    keyed.into_iter().map(|k| k.5).collect()
}

/// What borrowed jobs already asked to stop on one node hold.
#[derive(Debug, Clone, Copy, Default)]
struct Stopping {
    gpus: u32,
    cpu_millis: u32,
    memory_mib: u64,
    jobs: usize,
}

/// The node where preempting borrowed jobs (of other teams, not already
/// preempted) makes room for `r` at the least cost: fewest GPUs taken back,
/// then fewest jobs; what jobs already stopping there free counts first
/// (a plan may need no new victim). Victims are the lowest-priority,
/// latest-started first.
fn preemption_plan(
    r: &Resources,
    free: &[Free],
    borrowed_on_node: &[Vec<&RunningJob>],
    stopping: &[Stopping],
    preempted: &std::collections::HashSet<JobId>,
    team: TeamId,
) -> Option<(usize, Vec<JobId>)> {
    let mut best: Option<(u32, usize, usize, Vec<JobId>)> = None;
    for (i, f) in free.iter().enumerate() {
        if !f.schedulable || f.held_by.is_some_and(|h| !h.borrower) {
            continue;
        }
        let mut victims: Vec<&&RunningJob> = borrowed_on_node[i]
            .iter()
            .filter(|j| j.team != team && !preempted.contains(&j.id))
            .collect();
        let going = stopping[i];
        if victims.is_empty() && going.jobs == 0 {
            continue;
        }
        victims.sort_by_key(|j| (j.priority, std::cmp::Reverse(j.started_at), j.id));
        let mut gpus = f.free_gpus + going.gpus;
        let mut cpu = f.cpu_millis + going.cpu_millis;
        let mut mem = f.memory_mib + going.memory_mib;
        let mut chosen = Vec::new();
        let mut taken = 0;
        for v in victims {
            if gpus >= r.gpus && cpu >= r.cpu_millis && mem >= r.memory_mib {
                break;
            }
            gpus += v.resources.gpus;
            cpu += v.resources.cpu_millis;
            mem += v.resources.memory_mib;
            taken += v.resources.gpus;
            chosen.push(v.id);
        }
        if gpus >= r.gpus && cpu >= r.cpu_millis && mem >= r.memory_mib {
            let better = match &best {
                None => true,
                Some((t, n, _, _)) => (taken, chosen.len()) < (*t, *n),
            };
            if better {
                best = Some((taken, chosen.len(), i, chosen));
            }
        }
    }
    best.map(|(_, _, i, victims)| (i, victims))
}

/// Why a job that no open node could ever hold waits: nodes that take
/// nothing new now would hold it, or none would.
fn closed_or_never(state: &State, r: &Resources, largest_node: u32) -> Reason {
    /// Closed nodes named in a reason; the rest are counted.
    const NAMED: usize = 3;
    let mut big_enough = state
        .nodes
        .iter()
        .filter(|n| !n.schedulable && n.holds(r))
        .map(|n| n.name.clone());
    let nodes: Vec<String> = big_enough.by_ref().take(NAMED).collect();
    if nodes.is_empty() {
        if r.gpus > largest_node {
            return Reason::NeverFits {
                gpus: r.gpus,
                largest_node,
            };
        }
        return Reason::NoCpuOrMemory {
            gpus: r.gpus,
            cpu_millis: r.cpu_millis,
            memory_mib: r.memory_mib,
        };
    }
    Reason::Closed {
        nodes,
        more: big_enough.count(),
    }
}

/// The schedulable node closest to fitting `r`: the most free GPUs among
/// unheld nodes big enough for it, and, for a job within its quota, nodes
/// held for borrowers too.
fn nearest_node(
    r: &Resources,
    by_free: &BTreeSet<(u32, usize)>,
    free: &[Free],
    held_nodes: &[usize],
    within_quota: bool,
) -> Option<usize> {
    let big_enough = |i: &usize| free[*i].gpus.len() as u32 >= r.gpus;
    let unheld = by_free.iter().rev().map(|&(_, i)| i).find(big_enough);
    if !within_quota {
        return unheld;
    }
    held_nodes
        .iter()
        .copied()
        .filter(|&i| free[i].held_by.is_some_and(|h| h.borrower) && big_enough(&i))
        .chain(unheld)
        .max_by_key(|&i| (free[i].free_gpus, std::cmp::Reverse(i)))
}

#[cfg(test)]
mod tests;
