//! The `trainyard` binary as users run it: start-up errors that name the
//! setting, `version`, `migrate`, and graceful shutdown on SIGTERM and SIGINT.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn trainyard() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_trainyard"));
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("TRAINYARD_SITE_DIR", "/nonexistent-site");
    cmd
}

fn fails_with(cmd: &mut Command, expected: &str) {
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "it should fail: {stderr}");
    assert!(
        stderr.contains(expected),
        "expected `{expected}` in: {stderr}"
    );
}

#[test]
fn bad_configuration_stops_the_start_naming_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    fails_with(
        trainyard()
            .arg("serve")
            .env("TRAINYARD_DATA_DIR", &data)
            .env("TRAINYARD_LISTN", "x"),
        "unknown setting `listn`",
    );
    fails_with(
        trainyard()
            .env("TRAINYARD_DATA_DIR", &data)
            .env("TRAINYARD_DATABASE_URL", "mysql://db/x"),
        "database_url: unsupported scheme `mysql`",
    );
    fails_with(
        trainyard().env("TRAINYARD_DATA_DIR", &data).env(
            "TRAINYARD_DATABASE_URL",
            format!("sqlite://{}/missing/x.db", dir.path().display()),
        ),
        "database_url: the folder",
    );
    // A data folder under a regular file cannot be created.
    let file = dir.path().join("file");
    std::fs::write(&file, "").unwrap();
    fails_with(
        trainyard().env("TRAINYARD_DATA_DIR", file.join("sub")),
        "data_dir: cannot create",
    );
    fails_with(
        trainyard()
            .env("TRAINYARD_DATA_DIR", &data)
            .env("TRAINYARD_LISTEN", "not-an-address"),
        "setting `listen`",
    );
    let toml = dir.path().join("trainyard.toml");
    std::fs::write(
        &toml,
        "listen = \"127.0.0.1:0\"\nfavourite_colour = \"green\"\n",
    )
    .unwrap();
    fails_with(
        trainyard()
            .arg("--config")
            .arg(&toml)
            .env("TRAINYARD_DATA_DIR", &data),
        "unknown setting `favourite_colour`",
    );
}

#[test]
fn serve_help_lists_every_setting() {
    let out = trainyard().args(["serve", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    for env in trainyard::config::SETTINGS.iter().map(|s| s.env) {
        assert!(
            help.contains(env),
            "{env} missing from serve --help:\n{help}"
        );
    }
}

#[test]
fn version_and_migrate() {
    let out = trainyard().arg("version").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with(&format!("trainyard {}", env!("CARGO_PKG_VERSION"))),
        "{text}"
    );
    assert!(text.contains("m20261129_000001_core_model"), "{text}");

    let dir = tempfile::tempdir().unwrap();
    let status =
        |cmd: &mut Command| String::from_utf8_lossy(&cmd.output().unwrap().stdout).into_owned();
    let pending = status(
        trainyard()
            .args(["migrate", "--status"])
            .env("TRAINYARD_DATA_DIR", dir.path()),
    );
    assert!(
        pending.contains("pending  m20261129_000001_core_model"),
        "{pending}"
    );
    let applied = status(
        trainyard()
            .arg("migrate")
            .env("TRAINYARD_DATA_DIR", dir.path()),
    );
    let known = trainyard_store::Store::known_migrations();
    assert!(
        applied.contains(&format!("applied {} migration(s)", known.len())),
        "{applied}"
    );
    for name in &known {
        assert!(applied.contains(name.as_str()), "{applied}");
    }
    let after = status(
        trainyard()
            .args(["migrate", "--status"])
            .env("TRAINYARD_DATA_DIR", dir.path()),
    );
    assert!(
        after.contains("applied  m20261129_000001_core_model"),
        "{after}"
    );
    assert!(dir.path().join("trainyard.db").is_file());
}

/// Starts `serve` on port 0 and returns the child and its address.
fn spawn_server(data: &std::path::Path) -> (std::process::Child, String) {
    let mut child = trainyard()
        .env("TRAINYARD_DATA_DIR", data)
        .env("TRAINYARD_LISTEN", "127.0.0.1:0")
        .env("TRAINYARD_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix("Trainyard is running at http://")
        .unwrap_or_else(|| panic!("unexpected first line: {line}"))
        .to_owned();
    (child, addr)
}

fn wait_for_exit(child: &mut std::process::Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "the server did not stop");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn sigterm_and_sigint_stop_the_server_cleanly() {
    for signal in ["-TERM", "-INT"] {
        let dir = tempfile::tempdir().unwrap();
        let (mut child, addr) = spawn_server(dir.path());
        // It answers before the signal…
        let stream = std::net::TcpStream::connect(&addr);
        assert!(stream.is_ok(), "the server listens at {addr}");
        drop(stream);
        let killed = Command::new("kill")
            .arg(signal)
            .arg(child.id().to_string())
            .status()
            .unwrap();
        assert!(killed.success());
        let status = wait_for_exit(&mut child);
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        assert!(status.success(), "exit {status:?} after {signal}: {stderr}");
        assert!(stderr.contains("shutting down"), "{stderr}");
        assert!(stderr.contains("stopped"), "{stderr}");
        // …and no longer after it.
        assert!(std::net::TcpStream::connect(&addr).is_err());
    }
}
