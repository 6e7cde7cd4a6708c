use std::collections::{HashMap, HashSet};

use super::*;

const HOUR: i64 = 3_600_000;

fn node(id: NodeId, gpus: u32) -> Node {
    Node {
        id,
        name: format!("node-{id}"),
        gpus,
        cpu_millis: 64_000,
        memory_mib: 512 * 1024,
        schedulable: true,
    }
}

fn team(id: TeamId, quota_gpus: u32) -> Team {
    Team {
        id,
        name: format!("team-{id}"),
        quota_gpus,
        share: 1.0,
    }
}

fn gpus(n: u32) -> Resources {
    Resources {
        gpus: n,
        cpu_millis: 1000,
        memory_mib: 1024,
    }
}

fn pending(id: JobId, team: TeamId, n: u32) -> PendingJob {
    PendingJob {
        id,
        team,
        user: team * 100,
        priority: 0,
        submitted_at: id as i64,
        resources: gpus(n),
        borrow: true,
        max_runtime_ms: None,
    }
}

fn running(id: JobId, team: TeamId, node: NodeId, gpu_list: &[u32], started_at: i64) -> RunningJob {
    RunningJob {
        id,
        team,
        user: team * 100,
        priority: 0,
        started_at,
        ends_by: None,
        node,
        gpus: gpu_list.to_vec(),
        resources: gpus(gpu_list.len() as u32),
        preemptible: true,
        preempting: false,
    }
}

fn started(d: &Decision) -> Vec<JobId> {
    d.starts.iter().map(|p| p.job).collect()
}

fn reason_of(d: &Decision, job: JobId) -> String {
    d.waiting
        .iter()
        .find(|w| w.job == job)
        .map(|w| w.reason.to_string())
        .unwrap_or_else(|| panic!("job {job} is not waiting"))
}

#[test]
fn the_queue_goes_by_priority_then_fair_share_then_age() {
    let mut state = State {
        now: 10 * HOUR,
        nodes: vec![node(1, 1)],
        teams: vec![team(1, 1), team(2, 1)],
        ..State::default()
    };
    state.usage.add(1, 100, 50.0, 0.0, 24.0);
    let mut heavy = pending(1, 1, 1);
    heavy.submitted_at = 10 * HOUR;
    let mut light = pending(2, 2, 1);
    light.submitted_at = 10 * HOUR;
    let mut urgent = pending(3, 1, 1);
    urgent.priority = 5;
    urgent.submitted_at = 10 * HOUR;
    state.pending = vec![heavy.clone(), light.clone(), urgent.clone()];
    let d = schedule(&state, &Policy::default());
    assert_eq!(started(&d), vec![3], "priority first");
    assert_eq!(
        d.waiting
            .iter()
            .map(|w| (w.job, w.position))
            .collect::<Vec<_>>(),
        vec![(2, 2), (1, 3)],
        "then the team that used less"
    );

    // Waiting raises priority: a job waiting 6 hours passes a priority-5 job.
    let mut old = pending(4, 1, 1);
    old.submitted_at = 4 * HOUR;
    state.pending = vec![urgent, old];
    let d = schedule(&state, &Policy::default());
    assert_eq!(started(&d), vec![4]);
}

#[test]
fn best_fit_keeps_big_blocks_free() {
    let state = State {
        nodes: vec![node(1, 8), node(2, 4)],
        teams: vec![team(1, 16)],
        running: vec![running(10, 1, 2, &[0, 1], 0)],
        pending: vec![pending(1, 1, 2), pending(2, 1, 8)],
        ..State::default()
    };
    let d = schedule(&state, &Policy::default());
    assert_eq!(
        d.starts,
        vec![
            Placement {
                job: 1,
                node: 2,
                gpus: vec![2, 3],
                borrowed: false
            },
            Placement {
                job: 2,
                node: 1,
                gpus: (0..8).collect(),
                borrowed: false
            },
        ]
    );
}

#[test]
fn teams_borrow_idle_gpus_beyond_their_quota() {
    let state = State {
        nodes: vec![node(1, 8)],
        teams: vec![team(1, 4), team(2, 4)],
        pending: (1..=6).map(|id| pending(id, 1, 1)).collect(),
        ..State::default()
    };
    let d = schedule(&state, &Policy::default());
    assert_eq!(d.starts.len(), 6);
    assert_eq!(
        d.starts.iter().filter(|p| p.borrowed).count(),
        2,
        "two beyond the quota of four are borrowed"
    );
    let strict = Policy {
        borrowing: false,
        ..Policy::default()
    };
    let d = schedule(&state, &strict);
    assert_eq!(d.starts.len(), 4);
    assert_eq!(
        reason_of(&d, 5),
        "team team-1: 4 of 4 guaranteed GPUs in use; waiting for idle GPUs to borrow"
    );
}

#[test]
fn owners_take_borrowed_gpus_back() {
    // Team 1 (quota 2) runs 8 GPUs: 6 are borrowed. Team 2 (quota 6) wants 4.
    let state = State {
        now: 100,
        nodes: vec![node(1, 8)],
        teams: vec![team(1, 2), team(2, 6)],
        running: vec![
            running(10, 1, 1, &[0, 1], 1),
            running(11, 1, 1, &[2, 3], 2),
            running(12, 1, 1, &[4, 5], 3),
            running(13, 1, 1, &[6, 7], 4),
        ],
        pending: vec![pending(1, 2, 4), pending(2, 1, 1)],
        ..State::default()
    };
    assert_eq!(borrowed_jobs(&state.teams, &state.running).len(), 3);
    let d = schedule(&state, &Policy::default());
    assert!(d.starts.is_empty());
    let mut victims: Vec<JobId> = d.preempt.iter().map(|p| p.job).collect();
    victims.sort();
    assert_eq!(victims, vec![12, 13], "the latest-started borrowed jobs");
    assert_eq!(
        reason_of(&d, 1),
        "stopping 2 borrowed jobs on node-1 to give the team its guaranteed GPUs"
    );
    assert_eq!(
        reason_of(&d, 2),
        "team team-1: 8 of 2 guaranteed GPUs in use; waiting for idle GPUs to borrow"
    );

    // Once they stop, the owner's job starts on the GPUs they held.
    let mut next = state.clone();
    next.running.retain(|j| !victims.contains(&j.id));
    let d = schedule(&next, &Policy::default());
    assert_eq!(d.starts[0].job, 1);
    assert_eq!(d.starts[0].gpus, vec![4, 5, 6, 7]);
    assert!(!d.starts[0].borrowed);
}

#[test]
fn every_waiting_job_has_a_reason_in_words() {
    let state = State {
        nodes: vec![node(1, 8), node(2, 8)],
        teams: vec![team(1, 16)],
        running: vec![
            running(10, 1, 1, &[0, 1, 2, 3, 4], 0),
            running(11, 1, 2, &[0, 1, 2, 3, 4, 5], 0),
        ],
        pending: vec![pending(1, 1, 16), pending(2, 1, 4), pending(3, 1, 3)],
        ..State::default()
    };
    let d = schedule(&state, &Policy::default());
    assert_eq!(
        reason_of(&d, 1),
        "needs 16 GPUs on one node; the largest node has 8"
    );
    assert_eq!(
        reason_of(&d, 2),
        "no node has 4 free GPUs; largest free block is 3"
    );
    // Job 2 holds node 1 (3 free), so job 3 may not take it.
    assert_eq!(
        reason_of(&d, 3),
        "what frees up on node-1 is kept for job 2, which is ahead in the queue"
    );
    assert_eq!(
        admissible(&state.nodes, &gpus(9)).unwrap_err().to_string(),
        "needs 9 GPUs on one node; the largest node has 8"
    );
    assert!(admissible(&state.nodes, &gpus(8)).is_ok());

    let mut hungry = pending(4, 1, 1);
    hungry.resources.memory_mib = 600 * 1024;
    let state = State {
        nodes: vec![node(1, 8)],
        teams: vec![team(1, 8)],
        running: vec![RunningJob {
            resources: Resources {
                gpus: 1,
                cpu_millis: 1000,
                memory_mib: 100 * 1024,
            },
            ..running(10, 1, 1, &[0], 0)
        }],
        pending: vec![hungry],
        ..State::default()
    };
    let d = schedule(&state, &Policy::default());
    assert_eq!(
        reason_of(&d, 4),
        "no node with 1 free GPU also has 1 CPU and 600 GiB of memory free"
    );
}

#[test]
fn cordoned_nodes_take_no_new_jobs() {
    let mut n = node(1, 8);
    n.schedulable = false;
    let state = State {
        nodes: vec![n, node(2, 2)],
        teams: vec![team(1, 8)],
        pending: vec![pending(1, 1, 4), pending(2, 1, 2)],
        ..State::default()
    };
    let d = schedule(&state, &Policy::default());
    assert_eq!(started(&d), vec![2]);
    assert_eq!(
        reason_of(&d, 1),
        "node-1, the only node it fits on, takes no new jobs now"
    );
}

/// A job that only closed nodes (drained, cordoned) could hold says which
/// nodes those are, not that it can never run; one no node could ever hold
/// still says so, and a job without GPUs waits while no node is open.
#[test]
fn jobs_that_only_closed_nodes_could_hold_name_them() {
    let closed = |id, gpus| Node {
        schedulable: false,
        ..node(id, gpus)
    };
    let state = State {
        nodes: (1..=5)
            .map(|i| closed(i, 8))
            .chain([node(6, 2), closed(7, 1)])
            .collect(),
        teams: vec![team(1, 64)],
        pending: vec![pending(1, 1, 4), pending(2, 1, 16), pending(3, 1, 1)],
        ..State::default()
    };
    let d = schedule(&state, &Policy::default());
    assert_eq!(started(&d), vec![3]);
    assert_eq!(
        reason_of(&d, 1),
        "the 5 nodes it fits on (node-1, node-2, node-3 and 2 more) take no new jobs now"
    );
    assert_eq!(
        reason_of(&d, 2),
        "needs 16 GPUs on one node; the largest node has 2"
    );
    let all_closed = State {
        nodes: vec![closed(1, 0), closed(2, 0)],
        teams: vec![team(1, 0)],
        pending: vec![pending(1, 1, 0)],
        ..State::default()
    };
    let d = schedule(&all_closed, &Policy::default());
    assert!(started(&d).is_empty());
    assert!(d.waiting.iter().all(|w| w.position > 0));
    assert_eq!(
        reason_of(&d, 1),
        "the 2 nodes it fits on (node-1, node-2) take no new jobs now"
    );
}

/// SplitMix64: a small deterministic generator, so that a failing case is
/// reproduced by its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn random_state(rng: &mut Rng) -> State {
    let nodes: Vec<Node> = (0..1 + rng.below(6))
        .map(|i| {
            let mut n = node(i as NodeId, [1, 2, 4, 8][rng.below(4) as usize]);
            n.cpu_millis = 8_000 + 8_000 * rng.below(4) as u32;
            n.memory_mib = 32 * 1024 * (1 + rng.below(4));
            n.schedulable = rng.below(10) != 0;
            n
        })
        .collect();
    let teams: Vec<Team> = (0..1 + rng.below(4))
        .map(|i| Team {
            share: 0.5 + rng.below(4) as f64,
            ..team(i as TeamId, rng.below(10) as u32)
        })
        .collect();
    let mut state = State {
        now: 10 * HOUR,
        nodes,
        teams,
        ..State::default()
    };
    // Running jobs that fit, placed by a first-fit pass of our own.
    let mut next_id = 1;
    for n in state.nodes.clone() {
        let mut free: Vec<u32> = (0..n.gpus).collect();
        let (mut cpu, mut mem) = (n.cpu_millis, n.memory_mib);
        while !free.is_empty() && rng.below(3) != 0 {
            let want = 1 + rng.below(free.len() as u64) as usize;
            let r = Resources {
                gpus: want as u32,
                cpu_millis: 1000 * (1 + rng.below(4) as u32),
                memory_mib: 1024 * (1 + rng.below(16)),
            };
            if r.cpu_millis > cpu || r.memory_mib > mem {
                break;
            }
            cpu -= r.cpu_millis;
            mem -= r.memory_mib;
            let taken: Vec<u32> = free.drain(..want).collect();
            let team = rng.below(state.teams.len() as u64) as TeamId;
            state.running.push(RunningJob {
                resources: r,
                priority: rng.below(3) as i32,
                // Now and then one already asked to stop, or not preemptible.
                preempting: rng.below(8) == 0,
                preemptible: rng.below(8) != 0,
                ends_by: (rng.below(4) != 0)
                    .then(|| state.now + rng.below(10 * HOUR as u64) as i64),
                ..running(next_id, team, n.id, &taken, rng.below(1000) as i64)
            });
            next_id += 1;
        }
    }
    for _ in 0..rng.below(30) {
        let team = rng.below(state.teams.len() as u64) as TeamId;
        state.pending.push(PendingJob {
            id: next_id,
            team,
            user: team * 100 + rng.below(3) as UserId,
            priority: rng.below(3) as i32,
            submitted_at: state.now - rng.below(5 * HOUR as u64) as i64,
            resources: Resources {
                gpus: rng.below(9) as u32,
                cpu_millis: 1000 * rng.below(8) as u32,
                memory_mib: 1024 * rng.below(64),
            },
            // Now and then a job that may not be preempted.
            borrow: rng.below(5) != 0,
            max_runtime_ms: (rng.below(2) == 0).then(|| rng.below(10 * HOUR as u64) as i64 + 1),
        });
        next_id += 1;
    }
    for t in &state.teams {
        state.usage.add(
            t.id,
            t.id * 100,
            rng.below(100) as f64,
            rng.below(48) as f64,
            24.0,
        );
    }
    state
}

/// The invariants of one decision, checked on many random clusters.
#[test]
fn decisions_never_overcommit_and_respect_quotas() {
    for seed in 0..3000 {
        let mut rng = Rng(seed);
        let state = random_state(&mut rng);
        let policy = Policy {
            borrowing: rng.below(4) != 0,
            ..Policy::default()
        };
        let d = schedule(&state, &policy);
        let nodes: HashMap<NodeId, &Node> = state.nodes.iter().map(|n| (n.id, n)).collect();
        let resources: HashMap<JobId, Resources> =
            state.pending.iter().map(|j| (j.id, j.resources)).collect();
        let teams_of: HashMap<JobId, TeamId> =
            state.pending.iter().map(|j| (j.id, j.team)).collect();

        // Every pending job is either started or waiting, once; positions
        // are 1..n.
        let mut seen: Vec<JobId> = started(&d);
        seen.extend(d.waiting.iter().map(|w| w.job));
        seen.sort();
        let mut all: Vec<JobId> = state.pending.iter().map(|j| j.id).collect();
        all.sort();
        assert_eq!(seen, all, "seed {seed}");

        // No GPU is given twice, nothing exceeds a node. Preempted jobs
        // still hold their GPUs until they stop.
        let mut taken: HashSet<(NodeId, u32)> = HashSet::new();
        let mut cpu: HashMap<NodeId, u64> = HashMap::new();
        let mut mem: HashMap<NodeId, u64> = HashMap::new();
        let placed = state
            .running
            .iter()
            .map(|j| (j.node, &j.gpus, j.resources))
            .chain(
                d.starts
                    .iter()
                    .map(|p| (p.node, &p.gpus, resources[&p.job])),
            );
        for (node_id, gpu_list, r) in placed {
            let n = nodes[&node_id];
            assert_eq!(gpu_list.len() as u32, r.gpus, "seed {seed}");
            for &g in gpu_list {
                assert!(g < n.gpus, "seed {seed}: GPU {g} is not on {}", n.name);
                assert!(
                    taken.insert((node_id, g)),
                    "seed {seed}: GPU {g} of {} given twice",
                    n.name
                );
            }
            *cpu.entry(node_id).or_default() += r.cpu_millis as u64;
            *mem.entry(node_id).or_default() += r.memory_mib;
        }
        for p in &d.starts {
            let n = nodes[&p.node];
            assert!(n.schedulable, "seed {seed}: started on a cordoned node");
            assert!(
                cpu[&p.node] <= n.cpu_millis as u64,
                "seed {seed}: CPUs overcommitted"
            );
            assert!(
                mem[&p.node] <= n.memory_mib,
                "seed {seed}: memory overcommitted"
            );
        }

        // With no guarantee anywhere, nothing is borrowed (nor preempted).
        let guarantees = state.teams.iter().any(|t| t.quota_gpus > 0);
        if !guarantees {
            assert!(
                d.starts.iter().all(|p| !p.borrowed)
                    && borrowed_jobs(&state.teams, &state.running).is_empty()
                    && d.preempt.is_empty(),
                "seed {seed}: borrowed without any guarantee"
            );
        }
        // Quotas: a team's own (not borrowed) GPUs stay within its quota,
        // and nothing is borrowed when borrowing is off.
        for t in state.teams.iter().filter(|_| guarantees) {
            let owned_running: u32 = {
                let borrowed: HashSet<JobId> = borrowed_jobs(&state.teams, &state.running)
                    .into_iter()
                    .collect();
                state
                    .running
                    .iter()
                    .filter(|j| j.team == t.id && !borrowed.contains(&j.id))
                    .map(|j| j.resources.gpus)
                    .sum()
            };
            let running_total: u32 = state
                .running
                .iter()
                .filter(|j| j.team == t.id)
                .map(|j| j.resources.gpus)
                .sum();
            let owned_new: u32 = d
                .starts
                .iter()
                .filter(|p| teams_of[&p.job] == t.id && !p.borrowed)
                .map(|p| p.gpus.len() as u32)
                .sum();
            // Jobs that may not be preempted are never borrowed: they alone
            // may exceed a quota (lowered after they started).
            let unpreemptible: u32 = state
                .running
                .iter()
                .filter(|j| j.team == t.id && !j.preemptible)
                .map(|j| j.resources.gpus)
                .sum();
            assert!(
                owned_running <= t.quota_gpus.max(unpreemptible),
                "seed {seed}"
            );
            // New jobs count as the team's own only while everything it
            // runs fits in the quota.
            assert!(
                owned_new == 0 || running_total + owned_new <= t.quota_gpus,
                "seed {seed}: team {} starts {owned_new} GPUs as its own beyond its quota",
                t.id
            );
            if !policy.borrowing {
                assert!(d.starts.iter().all(|p| !p.borrowed), "seed {seed}");
            }
        }
        // A job that may not be preempted never starts on borrowed GPUs.
        let borrows: HashMap<JobId, bool> =
            state.pending.iter().map(|j| (j.id, j.borrow)).collect();
        for p in &d.starts {
            assert!(
                borrows[&p.job] || !p.borrowed,
                "seed {seed}: job {} may not be preempted but borrowed",
                p.job
            );
        }

        // Only borrowed jobs are preempted.
        let borrowed: HashSet<JobId> = borrowed_jobs(&state.teams, &state.running)
            .into_iter()
            .collect();
        let preempting: HashSet<JobId> = state
            .running
            .iter()
            .filter(|j| j.preempting)
            .map(|j| j.id)
            .collect();
        for v in d.preempt.iter().map(|p| &p.job) {
            assert!(
                borrowed.contains(v),
                "seed {seed}: job {v} was not borrowed"
            );
            assert!(
                !preempting.contains(v),
                "seed {seed}: job {v} was already being preempted"
            );
        }
    }
}

/// A cluster over time: jobs arrive, run for their runtime, end; preempted
/// jobs go back to the queue. Returns each job's wait in ticks.
struct Sim {
    state: State,
    runtime: HashMap<JobId, i64>,
    ends: HashMap<JobId, i64>,
    waited: HashMap<JobId, i64>,
    tick_ms: i64,
}

impl Sim {
    fn new(nodes: Vec<Node>, teams: Vec<Team>) -> Sim {
        Sim {
            state: State {
                nodes,
                teams,
                ..State::default()
            },
            runtime: HashMap::new(),
            ends: HashMap::new(),
            waited: HashMap::new(),
            tick_ms: 10 * 60 * 1000,
        }
    }

    fn submit(&mut self, mut job: PendingJob, runtime_ticks: i64) {
        job.submitted_at = self.state.now;
        self.runtime.insert(job.id, runtime_ticks);
        self.state.pending.push(job);
    }

    fn step(&mut self) {
        let now = self.state.now;
        let ends = &self.ends;
        let mut finished = Vec::new();
        self.state.running.retain(|j| {
            let done = ends[&j.id] <= now;
            if done {
                finished.push(j.clone());
            }
            !done
        });
        for j in finished {
            let hours = (now - j.started_at) as f64 / HOUR as f64 * j.resources.gpus as f64;
            self.state.usage.add(j.team, j.user, hours, 0.0, 24.0);
        }
        let d = schedule(&self.state, &Policy::default());
        for v in d.preempt.iter().map(|p| &p.job) {
            let pos = self.state.running.iter().position(|j| j.id == *v).unwrap();
            let j = self.state.running.remove(pos);
            self.state.pending.push(PendingJob {
                id: j.id,
                team: j.team,
                user: j.user,
                priority: j.priority,
                submitted_at: j.started_at,
                resources: j.resources,
                borrow: true,
                max_runtime_ms: None,
            });
        }
        for p in d.starts {
            let pos = self
                .state
                .pending
                .iter()
                .position(|j| j.id == p.job)
                .unwrap();
            let j = self.state.pending.remove(pos);
            self.waited
                .entry(j.id)
                .or_insert((now - j.submitted_at) / self.tick_ms);
            self.ends
                .insert(j.id, now + self.runtime[&j.id] * self.tick_ms);
            self.state.running.push(RunningJob {
                id: j.id,
                team: j.team,
                user: j.user,
                priority: j.priority,
                started_at: now,
                ends_by: None,
                node: p.node,
                gpus: p.gpus,
                resources: j.resources,
                preemptible: j.borrow,
                preempting: false,
            });
        }
        self.state.now += self.tick_ms;
    }
}

#[test]
fn a_big_low_priority_job_starts_despite_a_stream_of_small_urgent_ones() {
    let mut sim = Sim::new(
        (0..4).map(|i| node(i, 8)).collect(),
        vec![team(1, 16), team(2, 16)],
    );
    let mut big = pending(1, 1, 8);
    big.priority = 0;
    sim.submit(big, 6);
    let mut next = 2;
    let mut rng = Rng(7);
    for tick in 0..300 {
        // Enough 1-GPU, priority-3 work to keep every GPU busy.
        for _ in 0..4 {
            let mut small = pending(next, 2, 1);
            small.priority = 3;
            sim.submit(small, 2 + rng.below(10) as i64);
            next += 1;
        }
        sim.step();
        if sim.waited.contains_key(&1) {
            assert!(tick < 60, "the big job waited {tick} ticks");
            return;
        }
    }
    panic!("the 8-GPU job never started");
}

#[test]
fn every_job_runs_in_random_workloads() {
    for seed in 0..40 {
        let mut rng = Rng(seed);
        let nodes: Vec<Node> = (0..2 + rng.below(4))
            .map(|i| node(i as NodeId, 8))
            .collect();
        let capacity = nodes.len() as u32 * 8;
        let teams: Vec<Team> = (0..3)
            .map(|i| team(i, if i == 2 { 0 } else { capacity / 2 }))
            .collect();
        let mut sim = Sim::new(nodes, teams);
        let mut next = 1;
        for _ in 0..100 {
            for _ in 0..rng.below(4) {
                let team = rng.below(3) as TeamId;
                let mut job = pending(next, team, 1 + rng.below(8) as u32);
                job.priority = rng.below(4) as i32;
                sim.submit(job, 1 + rng.below(12) as i64);
                next += 1;
            }
            sim.step();
        }
        for _ in 0..5000 {
            if sim.state.pending.is_empty() {
                break;
            }
            sim.step();
        }
        assert!(
            sim.state.pending.is_empty(),
            "seed {seed}: {} jobs never ran",
            sim.state.pending.len()
        );
        assert_eq!(sim.waited.len() as u64, next - 1, "seed {seed}");
    }
}

#[test]
fn with_no_quotas_the_queue_is_fair_share_between_people() {
    // No team has a quota: everything borrows, nothing is preempted, the
    // person who used less goes first, and a big job is not starved.
    let mut state = State {
        now: 10 * HOUR,
        nodes: vec![node(1, 4)],
        teams: vec![team(1, 0)],
        running: vec![running(10, 1, 1, &[0, 1, 2], 0)],
        pending: vec![
            PendingJob {
                user: 1,
                ..pending(1, 1, 1)
            },
            PendingJob {
                user: 2,
                ..pending(2, 1, 1)
            },
        ],
        ..State::default()
    };
    state.usage.add(1, 1, 50.0, 0.0, 168.0);
    state.usage.add(1, 2, 5.0, 0.0, 168.0);
    let d = schedule(&state, &Policy::default());
    assert_eq!(started(&d), vec![2], "the lighter user first");
    assert!(d.preempt.is_empty());
    assert_eq!(
        reason_of(&d, 1),
        "no node has 1 free GPU; largest free block is 0"
    );

    // A 4-GPU job ahead in the queue holds the node: later 1-GPU jobs do
    // not take the GPUs it waits for.
    state.pending = vec![
        PendingJob {
            user: 2,
            ..pending(3, 1, 4)
        },
        PendingJob {
            user: 1,
            ..pending(4, 1, 1)
        },
    ];
    let d = schedule(&state, &Policy::default());
    assert!(d.starts.is_empty());
    assert_eq!(
        reason_of(&d, 4),
        "what frees up on node-1 is kept for job 3, which is ahead in the queue"
    );
}

#[test]
fn a_team_within_its_quota_overrides_a_borrower_s_hold() {
    // Team 1 (no quota) borrows 3 of 4 GPUs and waits with a 4-GPU job
    // that holds the node. Team 2 (quota 2) still gets its guaranteed
    // GPUs: one idle GPU now, and the borrowed ones taken back.
    let state = State {
        now: 100,
        nodes: vec![node(1, 4)],
        teams: vec![team(1, 0), team(2, 2)],
        running: vec![running(10, 1, 1, &[0, 1], 1), running(11, 1, 1, &[2], 2)],
        pending: vec![
            PendingJob {
                priority: 5,
                ..pending(1, 1, 4)
            },
            pending(2, 2, 1),
            pending(3, 2, 1),
        ],
        ..State::default()
    };
    let d = schedule(&state, &Policy::default());
    assert_eq!(started(&d), vec![2], "the idle GPU, despite the hold");
    assert_eq!(d.starts[0].gpus, vec![3]);
    assert!(!d.starts[0].borrowed);
    assert_eq!(d.preempt.len(), 1);
    assert_eq!(d.preempt[0].job, 11, "the latest-started borrowed job");
    assert_eq!(
        d.preempt[0].to_string(),
        "preempted: team team-2 is within its quota of 2 GPUs and needs 1 (job 3)"
    );
}

#[test]
fn a_job_that_may_not_be_preempted_waits_for_its_team_s_own_gpus() {
    let state = State {
        now: 100,
        nodes: vec![node(1, 8)],
        teams: vec![team(1, 2)],
        running: vec![running(10, 1, 1, &[0, 1], 1)],
        pending: vec![
            PendingJob {
                borrow: false,
                ..pending(1, 1, 1)
            },
            pending(2, 1, 1),
        ],
        ..State::default()
    };
    let d = schedule(&state, &Policy::default());
    assert_eq!(started(&d), vec![2], "the other job borrows");
    assert!(d.starts[0].borrowed);
    assert_eq!(
        reason_of(&d, 1),
        "team team-1: 2 of 2 guaranteed GPUs in use; this job may not be preempted, so it runs only on the team's own GPUs"
    );
    // One that asks for more than the guarantee (lowered after it was
    // submitted) says what would let it start.
    let wide = State {
        pending: vec![PendingJob {
            borrow: false,
            ..pending(3, 1, 3)
        }],
        running: Vec::new(),
        ..state.clone()
    };
    assert_eq!(
        reason_of(&schedule(&wide, &Policy::default()), 3),
        "team team-1: this job may not be preempted, so it runs only on the team's own GPUs, and it asks for 3 of 2 guaranteed GPUs: it starts only once an admin raises the team's guarantee (or it is moved to another team)"
    );
    // Started within the quota, it counts first against it: never borrowed.
    let running = vec![
        running(10, 1, 1, &[0], 1),
        RunningJob {
            preemptible: false,
            ..running(11, 1, 1, &[1, 2], 5)
        },
    ];
    assert_eq!(borrowed_jobs(&state.teams, &running), vec![10]);
}

#[test]
fn a_preemption_under_way_is_not_made_twice() {
    // Team 2 (quota 2) needs 1 GPU; team 1's borrowed job 11 was asked to
    // stop last cycle. This cycle waits for it rather than preempting 10.
    let state = State {
        now: 100,
        nodes: vec![node(1, 2)],
        teams: vec![team(1, 0), team(2, 2)],
        running: vec![
            running(10, 1, 1, &[0], 1),
            RunningJob {
                preempting: true,
                ..running(11, 1, 1, &[1], 2)
            },
        ],
        pending: vec![pending(1, 2, 1)],
        ..State::default()
    };
    let d = schedule(&state, &Policy::default());
    assert!(d.preempt.is_empty(), "{:?}", d.preempt);
    assert_eq!(
        reason_of(&d, 1),
        "stopping 1 borrowed job on node-1 to give the team its guaranteed GPUs"
    );
    // Needing 2, it takes the other borrowed job too.
    let mut more = state.clone();
    more.pending = vec![pending(2, 2, 2)];
    let d = schedule(&more, &Policy::default());
    assert_eq!(
        d.preempt.iter().map(|p| p.job).collect::<Vec<_>>(),
        vec![10]
    );
}

/// A node held for a job that waits for GPUs still runs later jobs that
/// take none of what it waits for: no GPUs, and CPU and memory beside the
/// held job's whole request. Those that would take any of it wait.
#[test]
fn a_held_node_runs_later_jobs_that_take_nothing_the_held_job_waits_for() {
    let cpu_job = |id: JobId, cpu_millis: u32| PendingJob {
        resources: Resources {
            gpus: 0,
            cpu_millis,
            memory_mib: 512,
        },
        ..pending(id, 1, 0)
    };
    let state = State {
        nodes: vec![Node {
            cpu_millis: 4000,
            memory_mib: 8192,
            ..node(1, 4)
        }],
        teams: vec![team(1, 0)],
        // 2 GPUs, 1 CPU and 1 GiB in use: 2 GPUs, 3 CPUs and 7 GiB free.
        running: vec![running(1, 1, 1, &[0, 1], 0)],
        pending: vec![
            pending(2, 1, 4),
            cpu_job(3, 500),
            pending(4, 1, 1),
            cpu_job(5, 2000),
            cpu_job(6, 1500),
        ],
        ..State::default()
    };
    let d = schedule(&state, &Policy::default());
    // Job 2 holds the node; 3 and then 6 leave its CPU and memory free.
    assert_eq!(started(&d), vec![3, 6]);
    assert_eq!(
        reason_of(&d, 2),
        "no node has 4 free GPUs; largest free block is 2"
    );
    let held = "what frees up on node-1 is kept for job 2, which is ahead in the queue";
    // 4 takes a GPU job 2 waits for; 5 would leave it 0.5 CPUs of its 1.
    assert_eq!(reason_of(&d, 4), held);
    assert_eq!(reason_of(&d, 5), held);
}

/// With every running job's maximum runtime known, a node held for a
/// job also runs a later job that ends before the held job could start
/// (its shadow time), or that takes only what will be left over beside it
/// then; one that could delay it waits (EASY backfill).
#[test]
fn a_held_node_backfills_what_cannot_delay_the_held_job() {
    const MIN: i64 = 60_000;
    let cpu_job = |id: JobId, cpu_millis: u32, minutes: Option<i64>| PendingJob {
        resources: Resources {
            gpus: 0,
            cpu_millis,
            memory_mib: 512,
        },
        max_runtime_ms: minutes.map(|m| m * MIN),
        ..pending(id, 1, 0)
    };
    let gpu_job = |id: JobId, n: u32, minutes: Option<i64>| PendingJob {
        max_runtime_ms: minutes.map(|m| m * MIN),
        ..pending(id, 1, n)
    };
    // 2 CPUs and 2 GPUs (the QA box); a 1-GPU job with 1 CPU runs until
    // minute 60 at the latest.
    let state = |pending: Vec<PendingJob>, ends_by: Option<i64>| State {
        now: 0,
        nodes: vec![Node {
            cpu_millis: 2000,
            memory_mib: 8192,
            ..node(1, 2)
        }],
        teams: vec![team(1, 0)],
        running: vec![RunningJob {
            ends_by,
            ..running(1, 1, 1, &[0], 0)
        }],
        pending,
        ..State::default()
    };
    // Job 2 (2 GPUs, 1 CPU) holds the node until job 1 ends (minute 60);
    // then 1 CPU is left beside it. Two CPU jobs of half a CPU take that
    // and start now, though the CPU free now (1) is less than job 2's 1
    // plus their own; a third would take what job 2 needs at minute 60.
    let d = schedule(
        &state(
            vec![
                gpu_job(2, 2, Some(600)),
                cpu_job(3, 500, Some(600)),
                cpu_job(4, 500, None),
                cpu_job(7, 100, None),
            ],
            Some(60 * MIN),
        ),
        &Policy::default(),
    );
    assert_eq!(started(&d), vec![3, 4], "{:?}", d.waiting);
    assert!(reason_of(&d, 7).contains("CPU"), "{}", reason_of(&d, 7));
    let held = "what frees up on node-1 is kept for job 2, which is ahead in the queue";
    // A job that ends by minute 30 cannot delay it, GPUs or not; one that
    // might run past minute 60 on a GPU it needs waits.
    let d = schedule(
        &state(
            vec![
                gpu_job(2, 2, Some(600)),
                gpu_job(3, 1, Some(600)),
                cpu_job(5, 1000, Some(30)),
            ],
            Some(60 * MIN),
        ),
        &Policy::default(),
    );
    assert_eq!(started(&d), vec![5], "ends by minute 30, before 60");
    assert_eq!(reason_of(&d, 3), held);
    let d = schedule(
        &state(
            vec![gpu_job(2, 2, Some(600)), gpu_job(6, 1, Some(30))],
            Some(60 * MIN),
        ),
        &Policy::default(),
    );
    assert_eq!(
        started(&d),
        vec![6],
        "a short GPU job ends before minute 60"
    );
    // One that would end just as job 1 does (the same runtime, started
    // with it) is not before: job 2 would find its GPU taken then.
    let d = schedule(
        &state(
            vec![gpu_job(2, 2, Some(600)), gpu_job(6, 1, Some(60))],
            Some(60 * MIN),
        ),
        &Policy::default(),
    );
    assert!(started(&d).is_empty(), "{:?}", d.starts);
    assert_eq!(reason_of(&d, 6), held);
    // A running job without a known end: no shadow time, so only what
    // leaves job 2's whole request free now may start (as before).
    let d = schedule(
        &state(
            vec![gpu_job(2, 2, Some(600)), cpu_job(3, 500, Some(1))],
            None,
        ),
        &Policy::default(),
    );
    assert!(started(&d).is_empty(), "{:?}", d.starts);
}

/// Nothing is borrowed where nothing could be taken back: with no team
/// guaranteed GPUs, or for a job of no GPUs beside a team's GPU jobs.
#[test]
fn jobs_borrow_only_gpus_that_a_guarantee_could_take_back() {
    let cpu_only = PendingJob {
        resources: gpus(0),
        ..pending(3, 1, 0)
    };
    let mut state = State {
        nodes: vec![node(1, 8)],
        teams: vec![team(1, 0), team(2, 0)],
        running: vec![running(10, 1, 1, &[0], 0)],
        pending: vec![pending(1, 1, 1), pending(2, 2, 1), cpu_only],
        ..State::default()
    };
    let d = schedule(&state, &Policy::default());
    assert_eq!(started(&d), vec![1, 2, 3]);
    assert!(d.starts.iter().all(|p| !p.borrowed), "{:?}", d.starts);
    assert!(borrowed_jobs(&state.teams, &state.running).is_empty());
    // Team 2 guaranteed 1 GPU: team 1's GPU jobs beyond its own (none) are
    // borrowed, its job of no GPUs is not, as borrowed_jobs says later.
    state.teams[1].quota_gpus = 1;
    let d = schedule(&state, &Policy::default());
    let flags: Vec<(JobId, bool)> = d.starts.iter().map(|p| (p.job, p.borrowed)).collect();
    assert_eq!(flags, [(1, true), (2, false), (3, false)]);
    assert_eq!(borrowed_jobs(&state.teams, &state.running), [10]);
}

/// A job only a closed node has the memory for waits naming it, and holds
/// no open node it could never use: that node's GPUs go to others.
#[test]
fn a_job_that_only_a_closed_node_has_room_for_holds_no_open_node() {
    let big = Node {
        memory_mib: 1024 * 1024,
        schedulable: false,
        ..node(1, 8)
    };
    let small = Node {
        memory_mib: 64 * 1024,
        ..node(2, 8)
    };
    let mut hungry = pending(1, 1, 1);
    hungry.resources.memory_mib = 512 * 1024;
    let state = State {
        nodes: vec![big, small],
        teams: vec![team(1, 8)],
        pending: vec![hungry, pending(2, 1, 1)],
        ..State::default()
    };
    let d = schedule(&state, &Policy::default());
    assert_eq!(started(&d), vec![2]);
    assert_eq!(
        reason_of(&d, 1),
        "node-1, the only node it fits on, takes no new jobs now"
    );
}

/// A job past its team's guarantee, whose only free GPU is kept for a job
/// ahead, says that, not that nothing is idle to borrow.
#[test]
fn a_borrower_waiting_on_a_held_gpu_is_told_whose_it_is() {
    let state = State {
        nodes: vec![node(1, 4)],
        teams: vec![team(1, 2), team(3, 0)],
        running: vec![
            running(10, 1, 1, &[0], 0),
            running(11, 1, 1, &[1], 0),
            running(12, 3, 1, &[2], 0),
        ],
        pending: vec![pending(1, 3, 4), pending(2, 1, 1)],
        ..State::default()
    };
    let d = schedule(&state, &Policy::default());
    assert!(started(&d).is_empty());
    assert_eq!(
        reason_of(&d, 2),
        "what frees up on node-1 is kept for job 1, which is ahead in the queue"
    );
}
