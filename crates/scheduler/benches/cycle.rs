//! `make bench-scheduler`: one scheduling cycle with 10,000 pending jobs of
//! 50 teams and 2,000 people (each with decayed usage, as the server keeps
//! it) on 1,000 nodes × 8 GPUs, half of the GPUs busy. Prints the median of
//! 21 cycles beside the target (50 ms).

use std::time::Instant;

use trainyard_scheduler::*;

fn main() {
    let nodes: Vec<Node> = (0..1000)
        .map(|i| Node {
            id: i,
            name: format!("node-{i}"),
            gpus: 8,
            cpu_millis: 128_000,
            memory_mib: 1024 * 1024,
            schedulable: true,
        })
        .collect();
    let teams: Vec<Team> = (0..50)
        .map(|i| Team {
            id: i,
            name: format!("team-{i}"),
            quota_gpus: 160,
            share: 1.0 + (i % 3) as f64,
        })
        .collect();
    let mut running = Vec::new();
    let mut id = 0u64;
    for n in &nodes {
        // Half the GPUs busy, in blocks of 1, 2 and 1 GPUs.
        for (first, count) in [(0u32, 1u32), (1, 2), (3, 1)] {
            id += 1;
            running.push(RunningJob {
                id,
                team: (id % 50) as u32,
                user: (id % 2000) as u32,
                priority: 0,
                started_at: id as i64,
                ends_by: Some(id as i64 + 86_400_000),
                node: n.id,
                gpus: (first..first + count).collect(),
                resources: Resources {
                    gpus: count,
                    cpu_millis: 4000,
                    memory_mib: 32 * 1024,
                },
                preemptible: true,
                preempting: false,
            });
        }
    }
    let mut usage = Usage::default();
    // Every person of every team used some GPU-hours over the last weeks.
    for user in 0..2000u32 {
        for days_ago in [1u32, 5, 12] {
            usage.add(
                user % 50,
                user,
                ((user * 7 + days_ago) % 40) as f64,
                (days_ago * 24) as f64,
                7.0 * 24.0,
            );
        }
    }
    let pending: Vec<PendingJob> = (0..10_000u64)
        .map(|i| PendingJob {
            id: 1_000_000 + i,
            team: (i % 50) as u32,
            user: (i % 2000) as u32,
            priority: (i % 3) as i32,
            submitted_at: (i * 1000) as i64,
            resources: Resources {
                gpus: [1, 1, 2, 4, 8][(i % 5) as usize],
                cpu_millis: 4000,
                memory_mib: 32 * 1024,
            },
            // One job in ten may not be preempted.
            borrow: i % 10 != 0,
            max_runtime_ms: Some(86_400_000),
        })
        .collect();
    let state = State {
        now: 20_000_000,
        nodes,
        teams,
        running,
        pending,
        usage,
    };
    let policy = Policy::default();
    let mut times = Vec::new();
    let mut last = Decision::default();
    for _ in 0..21 {
        let start = Instant::now();
        last = schedule(&state, &policy);
        times.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "scheduling cycle: 10,000 pending jobs of 50 teams and 2,000 people with usage, 1,000 nodes x 8 GPUs: median {:.1} ms (target <= 50 ms); {} started, {} waiting, {} preempted",
        times[times.len() / 2],
        last.starts.len(),
        last.waiting.len(),
        last.preempt.len()
    );
}
