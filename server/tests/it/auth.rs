//! Who may do what, against the real server: the single-user mode, sign-in
//! being required, sessions and tokens, cross-site requests, and the
//! authorization matrix (anonymous, another user, a team member, the owner,
//! an admin) over the jobs API, the MLflow run writes and tokens.
//!
//! The browser sign-in with a real OpenID Provider is tested by Playwright
//! (end2end/tests/auth.spec.ts); here people's sessions are opened in the
//! store, as the callback would.

use crate::common;

use std::time::Duration;

use common::{Response, TestServer, request, tar_gz};
use serde_json::{Value, json};
use trainyard_store::{SignIn, Store};

/// A server with sign-in on. The provider is never contacted here.
async fn sso_server() -> TestServer {
    TestServer::start_with(&[
        ("TRAINYARD_OIDC_ISSUER_URL", "http://127.0.0.1:9"),
        ("TRAINYARD_OIDC_CLIENT_ID", "trainyard"),
    ])
    .await
}

/// Someone signed in: their session cookie, its CSRF token, and an API token.
struct Person {
    cookie: String,
    csrf: String,
    token: String,
}

impl Person {
    fn bearer(&self) -> String {
        format!("Bearer {}", self.token)
    }
}

struct People {
    alice: Person,
    /// In alice's team.
    bob: Person,
    /// In another team.
    carol: Person,
    admin: Person,
}

async fn person(store: &Store, name: &str, groups: &[&str], admin: bool) -> Person {
    let user = store
        .sign_in(SignIn {
            subject: format!("sub-{name}"),
            username: name.to_owned(),
            display_name: name.to_uppercase(),
            email: None,
            is_admin: admin,
            groups: groups.iter().map(|g| g.to_string()).collect(),
        })
        .await
        .unwrap();
    let session = store
        .create_session(user.id, Duration::from_secs(3600), None)
        .await
        .unwrap();
    let token = store.create_api_token(user.id, "test", None).await.unwrap();
    Person {
        cookie: format!("trainyard_session={}", session.secret),
        csrf: session.csrf_token,
        token: token.secret,
    }
}

async fn people(server: &TestServer) -> People {
    let store = Store::connect(&server.db.url, 1).await.unwrap();
    let people = People {
        alice: person(&store, "alice", &["vision"], false).await,
        bob: person(&store, "bob", &["vision"], false).await,
        carol: person(&store, "carol", &["nlp"], false).await,
        admin: person(&store, "root", &["gpu-admins"], true).await,
    };
    store.close().await.unwrap();
    people
}

async fn call(
    server: &TestServer,
    method: &str,
    path: &str,
    auth: Option<&str>,
    body: &Value,
) -> Response {
    let text = if body.is_null() {
        String::new()
    } else {
        body.to_string()
    };
    let mut headers = vec![("Content-Type", "application/json")];
    if let Some(auth) = auth {
        headers.push(("Authorization", auth));
    }
    request(server.addr, method, path, &headers, text.as_bytes()).await
}

#[tokio::test]
async fn the_single_user_mode_is_the_local_admin_and_refuses_other_sites() {
    let server = TestServer::start().await;
    let me = server.get("/api/trainyard/v1/me").await;
    assert_eq!(me.status, 200, "{}", me.body);
    let me = me.json();
    assert_eq!(me["single_user"], true);
    assert_eq!(me["user"]["username"], "local");
    assert_eq!(me["user"]["is_admin"], true);

    // A page elsewhere cannot make the browser change things here.
    let body = json!({"name": "x"}).to_string();
    for (header, value) in [
        ("Sec-Fetch-Site", "cross-site"),
        ("Sec-Fetch-Site", "same-site"),
        ("Origin", "http://evil.example"),
    ] {
        let answer = request(
            server.addr,
            "POST",
            "/api/2.0/mlflow/experiments/create",
            &[("Content-Type", "application/json"), (header, value)],
            body.as_bytes(),
        )
        .await;
        assert_eq!(answer.status, 403, "{header}: {value}: {}", answer.body);
        assert!(answer.body.contains("cross-site"), "{}", answer.body);
    }
    // Our own pages may.
    let own = format!("http://{}", server.addr);
    let answer = request(
        server.addr,
        "POST",
        "/api/2.0/mlflow/experiments/create",
        &[("Content-Type", "application/json"), ("Origin", &own)],
        json!({"name": "from our page"}).to_string().as_bytes(),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);

    // A name that is not this machine's (DNS rebinding) is refused.
    let answer = request(
        server.addr,
        "GET",
        "/api/trainyard/v1/me",
        &[("Host", "rebound.evil.example")],
        b"",
    )
    .await;
    assert_eq!(answer.status, 403, "{}", answer.body);
    // Through a proxy on this machine, callers are not local.
    let proxied = request(
        server.addr,
        "GET",
        "/api/trainyard/v1/me",
        &[("X-Forwarded-For", "203.0.113.9")],
        b"",
    )
    .await;
    assert_eq!(proxied.status, 401, "{}", proxied.body);
    // Credentials are checked even here: a wrong token is not waved through.
    let answer = call(
        &server,
        "GET",
        "/api/trainyard/v1/me",
        Some("Bearer ty_nonsense"),
        &Value::Null,
    )
    .await;
    assert_eq!(answer.status, 401, "{}", answer.body);
}

#[tokio::test]
async fn with_sign_in_anonymous_callers_are_sent_to_sign_in() {
    let server = sso_server().await;
    let page = server.get("/jobs?all=1").await;
    assert_eq!(page.status, 303, "{}", page.body);
    assert_eq!(
        page.header("location"),
        Some("/auth/login?return_to=%2Fjobs%3Fall%3D1")
    );
    for path in [
        "/api/trainyard/v1/jobs",
        "/api/2.0/mlflow/experiments/search",
        "/api/list_job_page",
    ] {
        let answer = server.get(path).await;
        assert_eq!(answer.status, 401, "{path}: {}", answer.body);
        assert_eq!(answer.json()["error_code"], "UNAUTHENTICATED");
        assert_eq!(
            answer.header("www-authenticate"),
            Some("Bearer realm=\"trainyard\"")
        );
    }
    // A forged or stale session cookie is nobody.
    let forged = request(
        server.addr,
        "GET",
        "/api/trainyard/v1/me",
        &[("Cookie", "trainyard_session=forged")],
        b"",
    )
    .await;
    assert_eq!(forged.status, 401);
    // What must stay open does.
    assert_eq!(server.get("/healthz").await.status, 200);
    assert_eq!(server.get("/readyz").await.status, 200);
    assert_eq!(server.get("/auth/signed-out").await.status, 200);
    // Sign-in starts at the provider; this one is down, and says so.
    let login = server.get("/auth/login?return_to=/jobs").await;
    assert_eq!(login.status, 502, "{}", login.body);
    assert!(
        login.body.contains("could not be reached"),
        "{}",
        login.body
    );
    // A callback that this server did not start is refused.
    let callback = server.get("/auth/callback?code=abc&state=made-up").await;
    assert_eq!(callback.status, 400);
    assert!(callback.body.contains("start again"), "{}", callback.body);
    let callback = server.get("/auth/callback?code=abc").await;
    assert_eq!(callback.status, 400);
}

#[tokio::test]
async fn sessions_and_tokens_authenticate_and_tokens_are_managed_from_sessions() {
    let server = sso_server().await;
    let p = people(&server).await;
    let me = request(
        server.addr,
        "GET",
        "/api/trainyard/v1/me",
        &[("Cookie", &p.alice.cookie)],
        b"",
    )
    .await;
    assert_eq!(me.status, 200, "{}", me.body);
    let me = me.json();
    assert_eq!(me["user"]["username"], "alice");
    assert_eq!(me["single_user"], false);
    assert_eq!(me["user"]["teams"][0]["name"], "vision");
    assert_eq!(me["csrf_token"], p.alice.csrf.as_str());

    // A token, as Bearer or as the Basic password (MLFLOW_TRACKING_PASSWORD).
    let bearer = call(
        &server,
        "GET",
        "/api/trainyard/v1/me",
        Some(&p.alice.bearer()),
        &Value::Null,
    )
    .await;
    assert_eq!(bearer.json()["user"]["username"], "alice");
    use base64::Engine as _;
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("alice:{}", p.alice.token))
    );
    let basic = call(
        &server,
        "GET",
        "/api/trainyard/v1/me",
        Some(&basic),
        &Value::Null,
    )
    .await;
    assert_eq!(basic.status, 200, "{}", basic.body);

    // With the cookie, a change from another site is refused, from our
    // pages or with the CSRF token it passes.
    let create = |headers: Vec<(&'static str, String)>| {
        let addr = server.addr;
        async move {
            let mut all: Vec<(&str, &str)> = vec![("Content-Type", "application/json")];
            for (k, v) in &headers {
                all.push((k, v.as_str()));
            }
            request(
                addr,
                "POST",
                "/api/trainyard/v1/tokens",
                &all,
                json!({"name": "laptop", "expires_in_days": 30})
                    .to_string()
                    .as_bytes(),
            )
            .await
        }
    };
    let cross = create(vec![
        ("Cookie", p.alice.cookie.clone()),
        ("Sec-Fetch-Site", "cross-site".to_owned()),
    ])
    .await;
    assert_eq!(cross.status, 403, "{}", cross.body);
    let wrong_token = create(vec![
        ("Cookie", p.alice.cookie.clone()),
        ("Origin", "http://evil.example".to_owned()),
        ("X-CSRF-Token", "guess".to_owned()),
    ])
    .await;
    assert_eq!(wrong_token.status, 403, "{}", wrong_token.body);
    let with_token = create(vec![
        ("Cookie", p.alice.cookie.clone()),
        ("Origin", "http://evil.example".to_owned()),
        ("X-CSRF-Token", p.alice.csrf.clone()),
    ])
    .await;
    assert_eq!(with_token.status, 201, "{}", with_token.body);
    let made = with_token.json();
    let secret = made["secret"].as_str().unwrap().to_owned();
    let id = made["token"]["id"].as_i64().unwrap();
    let same_origin = create(vec![
        ("Cookie", p.alice.cookie.clone()),
        ("Sec-Fetch-Site", "same-origin".to_owned()),
    ])
    .await;
    assert_eq!(same_origin.status, 201, "{}", same_origin.body);

    // Bad requests name the field.
    let bad = request(
        server.addr,
        "POST",
        "/api/trainyard/v1/tokens",
        &[
            ("Cookie", &p.alice.cookie),
            ("Content-Type", "application/json"),
        ],
        json!({"name": "", "expires_in_days": 9999})
            .to_string()
            .as_bytes(),
    )
    .await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert_eq!(bad.json()["fields"][0]["field"], "name");

    // A token cannot make or revoke tokens.
    let by_token = call(
        &server,
        "POST",
        "/api/trainyard/v1/tokens",
        Some(&format!("Bearer {secret}")),
        &json!({"name": "more"}),
    )
    .await;
    assert_eq!(by_token.status, 403, "{}", by_token.body);
    let by_token = request(
        server.addr,
        "POST",
        "/api/create_token",
        &[
            ("Authorization", &format!("Bearer {secret}")),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        b"name=more&expires_in_days=",
    )
    .await;
    assert_eq!(by_token.status, 403, "{}", by_token.body);
    // The lifetime asked for is kept.
    let days = (made["token"]["expires_at"].as_i64().unwrap()
        - made["token"]["created_at"].as_i64().unwrap())
        / 86_400_000;
    assert_eq!(days, 30);

    // Listed without secrets; someone else cannot revoke it; its owner can.
    let listed = request(
        server.addr,
        "GET",
        "/api/trainyard/v1/tokens",
        &[("Cookie", &p.alice.cookie)],
        b"",
    )
    .await;
    assert!(!listed.body.contains(&secret));
    assert_eq!(listed.json()["tokens"].as_array().unwrap().len(), 3);
    let path = format!("/api/trainyard/v1/tokens/{id}");
    let by_carol = request(
        server.addr,
        "DELETE",
        &path,
        &[("Cookie", &p.carol.cookie)],
        b"",
    )
    .await;
    assert_eq!(by_carol.status, 404);
    let by_alice = request(
        server.addr,
        "DELETE",
        &path,
        &[("Cookie", &p.alice.cookie)],
        b"",
    )
    .await;
    assert_eq!(by_alice.status, 204, "{}", by_alice.body);
    let revoked = call(
        &server,
        "GET",
        "/api/trainyard/v1/me",
        Some(&format!("Bearer {secret}")),
        &Value::Null,
    )
    .await;
    assert_eq!(revoked.status, 401);

    // Signing out ends the session.
    let out = request(
        server.addr,
        "POST",
        "/auth/logout",
        &[
            ("Cookie", &p.alice.cookie),
            ("Sec-Fetch-Site", "same-origin"),
        ],
        b"",
    )
    .await;
    assert_eq!(out.status, 303);
    assert!(out.header("set-cookie").unwrap().contains("Max-Age=0"));
    let after = request(
        server.addr,
        "GET",
        "/api/trainyard/v1/me",
        &[("Cookie", &p.alice.cookie)],
        b"",
    )
    .await;
    assert_eq!(after.status, 401);
}

fn job_ids(answer: &Response) -> Vec<i64> {
    answer.json()["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_i64().unwrap())
        .collect()
}

#[tokio::test]
async fn jobs_are_seen_by_their_team_and_changed_by_their_owner() {
    let server = sso_server().await;
    let p = people(&server).await;
    let spec = json!({"name": "alice's", "command": "sleep 30", "resources": {"memory": "16Mi"}});
    let submitted = call(
        &server,
        "POST",
        "/api/trainyard/v1/jobs",
        Some(&p.alice.bearer()),
        &spec,
    )
    .await;
    assert_eq!(submitted.status, 201, "{}", submitted.body);
    let id = submitted.json()["job"]["id"].as_i64().unwrap();

    let anonymous: Option<&str> = None;
    let carol = p.carol.bearer();
    let bob = p.bob.bearer();
    let alice = p.alice.bearer();
    let admin = p.admin.bearer();
    // (who, may read, may change)
    let matrix = [
        (anonymous, 401, 401),
        (Some(carol.as_str()), 404, 404),
        (Some(bob.as_str()), 200, 403),
        (Some(alice.as_str()), 200, 200),
        (Some(admin.as_str()), 200, 200),
    ];
    for (who, read, _) in &matrix {
        for path in [
            format!("/api/trainyard/v1/jobs/{id}"),
            format!("/api/trainyard/v1/jobs/{id}/logs"),
            format!("/api/trainyard/v1/jobs/{id}/logs?download=1"),
        ] {
            let answer = call(&server, "GET", &path, *who, &Value::Null).await;
            assert_eq!(answer.status, *read, "{who:?} GET {path}: {}", answer.body);
        }
    }
    // The live log stream, and the pages' server functions, ask the same.
    for (who, status) in [(None, 401), (Some(carol.as_str()), 404)] {
        let path = format!("/api/trainyard/v1/jobs/{id}/logs/stream");
        assert_eq!(
            call(&server, "GET", &path, who, &Value::Null).await.status,
            status
        );
    }
    for (who, status, yours) in [
        (&carol, 404, None),
        (&bob, 200, Some(false)),
        (&alice, 200, Some(true)),
    ] {
        let answer = request(
            server.addr,
            "POST",
            "/api/get_job",
            &[
                ("Authorization", who),
                ("Content-Type", "application/x-www-form-urlencoded"),
            ],
            format!("id={id}").as_bytes(),
        )
        .await;
        assert_eq!(answer.status, status, "{}", answer.body);
        // Only its owner's page offers Cancel.
        if let Some(yours) = yours {
            assert_eq!(answer.json()["yours"], yours, "{}", answer.body);
        }
    }
    // Lists: mine, and all that one may see.
    let list = |who: &str, scope: &str| {
        let who = who.to_owned();
        let path = format!("/api/trainyard/v1/jobs?scope={scope}");
        let server = &server;
        async move { job_ids(&call(server, "GET", &path, Some(&who), &Value::Null).await) }
    };
    assert_eq!(list(&alice, "mine").await, [id]);
    assert!(list(&bob, "mine").await.is_empty());
    assert_eq!(list(&bob, "all").await, [id]);
    assert!(list(&carol, "all").await.is_empty());
    assert_eq!(list(&admin, "all").await, [id]);

    // Changing: the team may not, the owner may; a finished job may be run
    // again by its owner and an admin only.
    for (who, _, change) in &matrix[..3] {
        let answer = call(
            &server,
            "POST",
            &format!("/api/trainyard/v1/jobs/{id}/cancel"),
            *who,
            &Value::Null,
        )
        .await;
        assert_eq!(answer.status, *change, "{who:?} cancel: {}", answer.body);
    }
    let cancelled = call(
        &server,
        "POST",
        &format!("/api/trainyard/v1/jobs/{id}/cancel"),
        Some(&alice),
        &Value::Null,
    )
    .await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.body);
    for _ in 0..100 {
        let job = call(
            &server,
            "GET",
            &format!("/api/trainyard/v1/jobs/{id}"),
            Some(&alice),
            &Value::Null,
        )
        .await;
        if job.json()["job"]["state"] == "CANCELLED" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let retry = format!("/api/trainyard/v1/jobs/{id}/retry");
    assert_eq!(
        call(&server, "POST", &retry, Some(&bob), &Value::Null)
            .await
            .status,
        403
    );
    assert_eq!(
        call(&server, "POST", &retry, Some(&carol), &Value::Null)
            .await
            .status,
        404
    );
    let again = call(&server, "POST", &retry, Some(&admin), &Value::Null).await;
    assert_eq!(again.status, 201, "{}", again.body);
    let again_id = again.json()["job"]["id"].as_i64().unwrap();
    // The run again still belongs to alice, and says who ran it again.
    assert!(list(&alice, "mine").await.contains(&again_id));
    assert_eq!(again.json()["job"]["owner"], "alice", "{}", again.body);
    let timeline = |id: i64| {
        let server = &server;
        let alice = alice.clone();
        async move {
            call(
                server,
                "GET",
                &format!("/api/trainyard/v1/jobs/{id}"),
                Some(&alice),
                &Value::Null,
            )
            .await
            .json()["events"]
                .to_string()
        }
    };
    assert!(
        timeline(again_id)
            .await
            .contains(&format!("a retry of job {id} by root")),
        "{}",
        timeline(again_id).await
    );
    // An admin's cancel is named in the timeline; its owner's is not.
    let stop = format!("/api/trainyard/v1/jobs/{again_id}/cancel");
    assert_eq!(
        call(&server, "POST", &stop, Some(&admin), &Value::Null)
            .await
            .status,
        200
    );
    assert!(
        timeline(again_id).await.contains(" by root"),
        "{}",
        timeline(again_id).await
    );
    let own = timeline(id).await;
    assert!(own.contains("cancel"), "{own}");
    assert!(
        !own.contains("queued by") && !own.contains("requested by"),
        "{own}"
    );

    // A project upload is its uploader's to use.
    let archive = tar_gz(&[("train.py", "print('hi')\n")]);
    let uploaded = request(
        server.addr,
        "POST",
        "/api/trainyard/v1/uploads?kind=project&name=bobs.tar.gz",
        &[
            ("Authorization", &bob),
            ("Content-Type", "application/gzip"),
        ],
        &archive,
    )
    .await;
    assert_eq!(uploaded.status, 201, "{}", uploaded.body);
    let project = uploaded.json()["upload"]["id"].as_str().unwrap().to_owned();
    let with = |name: &str| json!({"name": name, "command": "python3 train.py", "project": project, "resources": {"memory": "16Mi"}});
    let taken = call(
        &server,
        "POST",
        "/api/trainyard/v1/jobs",
        Some(&alice),
        &with("not mine"),
    )
    .await;
    assert_eq!(taken.status, 400, "{}", taken.body);
    assert_eq!(taken.json()["fields"][0]["field"], "project");
    let own = call(
        &server,
        "POST",
        "/api/trainyard/v1/jobs",
        Some(&bob),
        &with("mine"),
    )
    .await;
    assert_eq!(own.status, 201, "{}", own.body);

    // Templates are the admins'.
    let template = "title: T\ndescription: says hi\ncommand: echo hi\n";
    for (who, status) in [(&alice, 403), (&admin, 200)] {
        let answer = request(
            server.addr,
            "PUT",
            "/api/trainyard/v1/templates/mine",
            &[("Authorization", who), ("Content-Type", "application/yaml")],
            template.as_bytes(),
        )
        .await;
        assert_eq!(answer.status, status, "{}", answer.body);
    }
    let delete = call(
        &server,
        "DELETE",
        "/api/trainyard/v1/templates/mine",
        Some(&bob),
        &Value::Null,
    )
    .await;
    assert_eq!(delete.status, 403);
}

#[tokio::test]
async fn runs_are_written_by_their_owner_and_a_jobs_token_by_its_job_only() {
    let server = sso_server().await;
    let p = people(&server).await;
    let alice = p.alice.bearer();
    let made = call(
        &server,
        "POST",
        "/api/2.0/mlflow/runs/create",
        Some(&alice),
        &json!({"experiment_id": "0"}),
    )
    .await;
    assert_eq!(made.status, 200, "{}", made.body);
    let other_run = made.json()["run"]["info"]["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let metric =
        |run: &str| json!({"run_id": run, "key": "m", "value": 1.0, "timestamp": 1, "step": 0});
    for (who, status) in [
        (p.carol.bearer(), 404),
        (p.bob.bearer(), 403),
        (alice.clone(), 200),
        (p.admin.bearer(), 200),
    ] {
        let answer = call(
            &server,
            "POST",
            "/api/2.0/mlflow/runs/log-metric",
            Some(&who),
            &metric(&other_run),
        )
        .await;
        assert_eq!(answer.status, status, "{}", answer.body);
    }

    // A job of alice's: its token writes to its run, and nothing else.
    let script = r#"
import json, os, urllib.request, urllib.error
uri = os.environ["MLFLOW_TRACKING_URI"]
auth = {"Authorization": "Bearer " + os.environ["MLFLOW_TRACKING_TOKEN"], "Content-Type": "application/json"}
def call(path, body):
    req = urllib.request.Request(uri + path, json.dumps(body).encode(), auth)
    try:
        return urllib.request.urlopen(req).status
    except urllib.error.HTTPError as e:
        return e.code
def metric(run):
    return {"run_id": run, "key": "loss", "value": 0.5, "timestamp": 1, "step": 1}
print("own", call("/api/2.0/mlflow/runs/log-metric", metric(os.environ["MLFLOW_RUN_ID"])))
print("other", call("/api/2.0/mlflow/runs/log-metric", metric(os.environ["OTHER_RUN"])))
print("create", call("/api/2.0/mlflow/runs/create", {"experiment_id": "0"}))
print("jobs", call("/api/trainyard/v1/jobs", {"name": "x", "command": "true"}))
def send(path, body, method="POST"):
    req = urllib.request.Request(uri + path, json.dumps(body).encode(), auth, method=method)
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, {}
own = os.environ["MLFLOW_RUN_ID"]
got = urllib.request.urlopen(urllib.request.Request(uri + "/api/2.0/mlflow/runs/get?run_id=" + own, headers=auth))
exp = json.load(got)["run"]["info"]["experiment_id"]
status, made = send("/api/2.0/mlflow/logged-models", {"experiment_id": exp, "name": "net", "source_run_id": own})
print("model", status)
model = "/api/2.0/mlflow/logged-models/" + made["model"]["info"]["model_id"]
print("finalize", send(model, {"status": "LOGGED_MODEL_READY"}, "PATCH")[0])
print("delete-model", send(model, {}, "DELETE")[0])
print("model-other", send("/api/2.0/mlflow/logged-models", {"experiment_id": "0", "name": "x", "source_run_id": os.environ["OTHER_RUN"]})[0])
print("model-none", send("/api/2.0/mlflow/logged-models", {"experiment_id": exp, "name": "x"})[0])
print("finalize-other", send("/api/2.0/mlflow/logged-models/" + os.environ["OTHER_MODEL"], {"status": "LOGGED_MODEL_READY"}, "PATCH")[0])
# Traces of its own run (one made outside a run is filed under it), their
# spans and assessments; none of another run or experiment.
def trace(tid, run=None, where=None):
    meta = {"mlflow.sourceRun": run} if run else {}
    return send("/api/3.0/mlflow/traces", {"trace": {"trace_info": {
        "trace_id": tid,
        "trace_location": {"type": "MLFLOW_EXPERIMENT", "mlflow_experiment": {"experiment_id": where or exp}},
        "request_time": "2026-12-05T10:00:00.000Z", "state": "OK", "trace_metadata": meta}}})
print("trace-own", trace("tr-job-own", own)[0])
status, bare = trace("tr-job-bare")
print("trace-bare", status, bare.get("trace", {}).get("trace_info", {}).get("trace_metadata", {}).get("mlflow.sourceRun") == own)
print("trace-other", trace("tr-job-other", os.environ["OTHER_RUN"])[0])
print("trace-elsewhere", trace("tr-job-elsewhere", None, os.environ["OTHER_EXP"])[0])
# A trace of alice's that her exporter's spans made, under no run: not
# the job's to complete (and so to take for its run).
print("trace-takeover", trace("tr-" + "0a" * 16)[0])
def put(path):
    req = urllib.request.Request(uri + path, b"{}", {"Authorization": auth["Authorization"]}, method="PUT")
    try:
        return urllib.request.urlopen(req).status
    except urllib.error.HTTPError as e:
        return e.code
print("spans-own", put("/api/2.0/mlflow-artifacts/artifacts/" + exp + "/traces/tr-job-own/artifacts/traces.json"))
print("spans-other", put("/api/2.0/mlflow-artifacts/artifacts/0/traces/tr-alice/artifacts/traces.json"))
# Runs under its own (mlflow.start_run(nested=True)): made in its
# experiment and written to; none under another run, elsewhere, or deeper.
def under(parent, where=None):
    return send("/api/2.0/mlflow/runs/create", {"experiment_id": where or exp,
        "tags": [{"key": "mlflow.parentRunId", "value": parent}]})
status, child = under(own)
print("child", status)
cid = child["run"]["info"]["run_id"]
print("child-metric", call("/api/2.0/mlflow/runs/log-metric", metric(cid)))
print("child-artifact", put("/api/2.0/mlflow-artifacts/artifacts/" + exp + "/" + cid + "/artifacts/trial.json"))
print("child-end", send("/api/2.0/mlflow/runs/update", {"run_id": cid, "status": "FINISHED"})[0])
print("left-running", under(own)[1]["run"]["info"]["run_id"])
print("retag", send("/api/2.0/mlflow/runs/set-tag", {"run_id": cid, "key": "mlflow.parentRunId", "value": os.environ["OTHER_RUN"]})[0])
print("child-of-other", under(os.environ["OTHER_RUN"])[0])
print("child-elsewhere", under(own, os.environ["OTHER_EXP"])[0])
print("grandchild", under(cid)[0])
def refusal(path, body):
    try:
        urllib.request.urlopen(urllib.request.Request(uri + path, json.dumps(body).encode(), auth))
        return "made"
    except urllib.error.HTTPError as e:
        return str(e.code) + " " + json.load(e)["message"]
print("experiment-create", refusal("/api/2.0/mlflow/experiments/create", {"name": "mine"}))
verdict = {"assessment": {"assessment_name": "n", "feedback": {"value": 1}}}
print("assess-own", send("/api/3.0/mlflow/traces/tr-job-own/assessments", verdict)[0])
print("assess-other", send("/api/3.0/mlflow/traces/tr-alice/assessments", verdict)[0])
print("link-own", send("/api/2.0/mlflow/traces/link-to-run", {"trace_ids": ["tr-job-bare"], "run_id": own})[0])
print("link-other", send("/api/2.0/mlflow/traces/link-to-run", {"trace_ids": ["tr-alice"], "run_id": own})[0])
where = {"locations": [{"type": "MLFLOW_EXPERIMENT", "mlflow_experiment": {"experiment_id": exp}}]}
print("trace-search", send("/api/3.0/mlflow/traces/search", where)[0])
prompts = {"prompt_versions": [{"name": "greet", "version": "1"}]}
print("prompts-own", send("/api/2.0/mlflow/traces/link-prompts", {"trace_id": "tr-job-own", **prompts})[0])
print("prompts-other", send("/api/2.0/mlflow/traces/link-prompts", {"trace_id": "tr-alice", **prompts})[0])
# Spans over OTLP: a new trace of its run's experiment is filed under its
# run; none elsewhere, none joining a trace of someone else's.
def otlp(trace_hex, where):
    span = {"traceId": trace_hex, "spanId": "0102030405060708", "name": "step", "startTimeUnixNano": "1"}
    body = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
    headers = {**auth, "x-mlflow-experiment-id": where}
    req = urllib.request.Request(uri + "/v1/traces", json.dumps(body).encode(), headers)
    try:
        return urllib.request.urlopen(req).status
    except urllib.error.HTTPError as e:
        return e.code
print("otlp-own", otlp("0b" * 16, exp))
got = urllib.request.urlopen(urllib.request.Request(uri + "/api/3.0/mlflow/traces/tr-" + "0b" * 16, headers=auth))
print("otlp-run", json.load(got)["trace"]["trace_info"]["trace_metadata"].get("mlflow.sourceRun") == own)
print("otlp-elsewhere", otlp("0c" * 16, os.environ["OTHER_EXP"]))
print("otlp-other", otlp("0a" * 16, exp))
# Evaluation datasets: read (an evaluation reads its data), not written.
ds = "/api/3.0/mlflow/datasets/" + os.environ["DATASET"]
def get(path):
    try:
        return urllib.request.urlopen(urllib.request.Request(uri + path, headers=auth)).status
    except urllib.error.HTTPError as e:
        return e.code
print("dataset-get", get(ds), get(ds + "/records"), get(ds + "/experiment-ids"))
print("dataset-search", send("/api/3.0/mlflow/datasets/search", {})[0])
print("dataset-create", send("/api/3.0/mlflow/datasets/create", {"name": "x"})[0])
print("dataset-merge", send(ds + "/records", {"records": "[{\"inputs\": {\"q\": 1}}]"})[0])
print("dataset-tag", send(ds + "/tags", {"tags": "{}"}, "PATCH")[0])
print("dataset-delete", send(ds, {}, "DELETE")[0])
# Registered scorers: read (an evaluation loads its judges), not changed.
print("scorer-list", get("/api/3.0/mlflow/scorers/list?experiment_id=" + exp))
print("scorer-register", send("/api/3.0/mlflow/scorers/register", {"experiment_id": exp, "name": "x", "serialized_scorer": "{}"})[0])
print("scorer-delete", send("/api/3.0/mlflow/scorers/delete", {"experiment_id": exp, "name": "x"}, "DELETE")[0])
"#;
    let other_model = call(
        &server,
        "POST",
        "/api/2.0/mlflow/logged-models",
        Some(&alice),
        &json!({"experiment_id": "0", "name": "alices", "source_run_id": other_run}),
    )
    .await;
    assert_eq!(other_model.status, 200, "{}", other_model.body);
    let other_model = other_model.json()["model"]["info"]["model_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let alices_trace = call(
        &server,
        "POST",
        "/api/3.0/mlflow/traces",
        Some(&alice),
        &json!({"trace": {"trace_info": {
            "trace_id": "tr-alice",
            "trace_location": {"type": "MLFLOW_EXPERIMENT", "mlflow_experiment": {"experiment_id": "0"}},
            "request_time": "2026-12-05T10:00:00.000Z",
            "state": "OK",
            "trace_metadata": {"mlflow.sourceRun": other_run},
        }}}),
    )
    .await;
    assert_eq!(alices_trace.status, 200, "{}", alices_trace.body);
    // And one that her exporter's spans made, in the job's experiment.
    let alices_spans = request(
        server.addr,
        "POST",
        "/v1/traces",
        &[
            ("Authorization", alice.as_str()),
            ("Content-Type", "application/json"),
            ("x-mlflow-experiment-id", "0"),
        ],
        json!({"resourceSpans": [{"scopeSpans": [{"spans": [{
            "traceId": "0a".repeat(16), "spanId": "0102030405060708", "name": "hers",
        }]}]}]})
        .to_string()
        .as_bytes(),
    )
    .await;
    assert_eq!(alices_spans.status, 200, "{}", alices_spans.body);
    let other_exp = call(
        &server,
        "POST",
        "/api/2.0/mlflow/experiments/create",
        Some(&alice),
        &json!({"name": "elsewhere"}),
    )
    .await;
    let other_exp = other_exp.json()["experiment_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let dataset = call(
        &server,
        "POST",
        "/api/3.0/mlflow/datasets/create",
        Some(&alice),
        &json!({"name": "questions"}),
    )
    .await;
    assert_eq!(dataset.status, 200, "{}", dataset.body);
    let dataset = dataset.json()["dataset"]["dataset_id"]
        .as_str()
        .unwrap()
        .to_owned();
    std::fs::write(server.data_dir.path().join("job.py"), script).unwrap();
    let spec = json!({
        "name": "token check",
        "command": format!("python3 {}", server.data_dir.path().join("job.py").display()),
        "resources": {"memory": "64Mi"},
        "env": {"OTHER_RUN": other_run, "OTHER_MODEL": other_model, "OTHER_EXP": other_exp, "DATASET": dataset},
    });
    let submitted = call(
        &server,
        "POST",
        "/api/trainyard/v1/jobs",
        Some(&alice),
        &spec,
    )
    .await;
    assert_eq!(submitted.status, 201, "{}", submitted.body);
    let id = submitted.json()["job"]["id"].as_i64().unwrap();
    let mut state = Value::Null;
    for _ in 0..600 {
        let job = call(
            &server,
            "GET",
            &format!("/api/trainyard/v1/jobs/{id}"),
            Some(&alice),
            &Value::Null,
        )
        .await;
        state = job.json()["job"].clone();
        if state["state"] == "SUCCEEDED" || state["state"] == "FAILED" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(state["state"], "SUCCEEDED", "{state}");
    let log = call(
        &server,
        "GET",
        &format!("/api/trainyard/v1/jobs/{id}/logs"),
        Some(&alice),
        &Value::Null,
    )
    .await;
    assert!(log.body.contains("own 200"), "{}", log.body);
    assert!(log.body.contains("other 403"), "{}", log.body);
    assert!(log.body.contains("create 403"), "{}", log.body);
    assert!(log.body.contains("jobs 403"), "{}", log.body);
    // The models of its own run only: made and finalized, never deleted.
    for line in [
        "model 200",
        "finalize 200",
        "delete-model 403",
        "model-other 403",
        "model-none 403",
        "finalize-other 403",
        // The traces of its run, their spans and verdicts; no others.
        "trace-own 200",
        "trace-bare 200 True",
        "trace-other 403",
        "trace-elsewhere 403",
        "trace-takeover 403",
        "spans-own 200",
        "spans-other 403",
        "child 200",
        "child-metric 200",
        "child-artifact 200",
        "child-end 200",
        "retag 403",
        "child-of-other 403",
        "child-elsewhere 403",
        "grandchild 403",
        "experiment-create 403 a job's token cannot make experiments: a job's run is in the \
         experiment its spec names. Put `experiment: NAME` in the job's spec",
        "assess-own 200",
        "assess-other 403",
        "link-own 200",
        "link-other 403",
        "trace-search 200",
        "prompts-own 200",
        "prompts-other 403",
        "otlp-own 200",
        "otlp-run True",
        "otlp-elsewhere 403",
        "otlp-other 403",
        "dataset-get 200 200 200",
        "dataset-search 200",
        "dataset-create 403",
        "dataset-merge 403",
        "dataset-tag 403",
        "dataset-delete 403",
        "scorer-list 200",
        "scorer-register 403",
        "scorer-delete 403",
    ] {
        assert!(log.body.contains(line), "{line}: {}", log.body);
    }
    // A run it made under its own and left running ended with the job.
    let left = log
        .body
        .lines()
        .find_map(|l| l.strip_prefix("left-running "))
        .unwrap_or_else(|| panic!("{}", log.body))
        .trim()
        .to_owned();
    let child = call(
        &server,
        "GET",
        &format!("/api/2.0/mlflow/runs/get?run_id={left}"),
        Some(&alice),
        &Value::Null,
    )
    .await;
    assert_eq!(
        child.json()["run"]["info"]["status"],
        "FINISHED",
        "{}",
        child.body
    );
    assert!(
        !child.json()["run"]["info"]["end_time"].is_null(),
        "{}",
        child.body
    );
    // The run is alice's, and the token died with the job.
    let run_id = state["run_id"].as_str().unwrap();
    let run = call(
        &server,
        "GET",
        &format!("/api/2.0/mlflow/runs/get?run_id={run_id}"),
        Some(&alice),
        &Value::Null,
    )
    .await;
    assert_eq!(run.json()["run"]["info"]["user_id"], "alice");
    assert_eq!(run.json()["run"]["data"]["metrics"][0]["key"], "loss");
    let token = common::job_token(&server, id);
    let token = token.as_str();
    let late = call(
        &server,
        "POST",
        "/api/2.0/mlflow/runs/log-metric",
        Some(&format!("Bearer {token}")),
        &metric(run_id),
    )
    .await;
    assert_eq!(late.status, 401, "{}", late.body);
}

#[tokio::test]
async fn experiments_and_runs_are_seen_by_their_team_and_changed_by_their_owner() {
    let server = sso_server().await;
    let p = people(&server).await;
    let alice = p.alice.bearer();
    let made = call(
        &server,
        "POST",
        "/api/2.0/mlflow/experiments/create",
        Some(&alice),
        &json!({"name": "alice-exp"}),
    )
    .await;
    assert_eq!(made.status, 200, "{}", made.body);
    let exp = made.json()["experiment_id"].as_str().unwrap().to_owned();
    let run = call(
        &server,
        "POST",
        "/api/2.0/mlflow/runs/create",
        Some(&alice),
        &json!({"experiment_id": exp, "user_id": "root"}),
    )
    .await;
    assert_eq!(run.status, 200, "{}", run.body);
    assert_eq!(
        run.json()["run"]["info"]["user_id"],
        "alice",
        "a run is its caller's"
    );
    let run_id = run.json()["run"]["info"]["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let logged = call(
        &server,
        "POST",
        "/api/2.0/mlflow/runs/log-metric",
        Some(&alice),
        &json!({"run_id": run_id, "key": "loss", "value": 1.0, "timestamp": 1, "step": 0}),
    )
    .await;
    assert_eq!(logged.status, 200, "{}", logged.body);

    let reads = [
        format!("/api/2.0/mlflow/experiments/get?experiment_id={exp}"),
        "/api/2.0/mlflow/experiments/get-by-name?experiment_name=alice-exp".to_owned(),
        format!("/api/2.0/mlflow/runs/get?run_id={run_id}"),
        format!("/api/2.0/mlflow/metrics/get-history?run_id={run_id}&metric_key=loss"),
        format!(
            "/api/2.0/mlflow/metrics/get-history-bulk-interval?run_ids={run_id}&metric_key=loss"
        ),
        format!("/api/2.0/mlflow-artifacts/artifacts?path={exp}/{run_id}/artifacts"),
    ];
    let carol = p.carol.bearer();
    let bob = p.bob.bearer();
    let admin = p.admin.bearer();
    for (who, status) in [(&carol, 404), (&bob, 200), (&alice, 200), (&admin, 200)] {
        for path in &reads {
            let answer = call(&server, "GET", path, Some(who), &Value::Null).await;
            assert_eq!(answer.status, status, "{who} GET {path}: {}", answer.body);
        }
        let series = call(
            &server,
            "POST",
            "/api/trainyard/v1/series",
            Some(who),
            &json!({"run_ids": [run_id], "keys": ["loss"]}),
        )
        .await;
        assert_eq!(series.status, status, "{}", series.body);
    }
    // Searches return only what one may see.
    let search = |who: &str| {
        let who = who.to_owned();
        let body = json!({"experiment_ids": [exp.clone(), "0"]});
        let server = &server;
        async move {
            let runs = call(
                server,
                "POST",
                "/api/2.0/mlflow/runs/search",
                Some(&who),
                &body,
            )
            .await
            .json();
            let exps = call(
                server,
                "POST",
                "/api/2.0/mlflow/experiments/search",
                Some(&who),
                &json!({}),
            )
            .await
            .json();
            let names: Vec<String> = exps["experiments"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["name"].as_str().unwrap().to_owned())
                .collect();
            (runs["runs"].as_array().map_or(0, Vec::len), names)
        }
    };
    assert_eq!(search(&carol).await, (0, vec!["Default".to_owned()]));
    let (runs, names) = search(&bob).await;
    assert_eq!(runs, 1);
    assert!(names.contains(&"alice-exp".to_owned()), "{names:?}");

    // Changes: only the owner (or an admin).
    let rename = |name: &str| json!({"experiment_id": exp, "new_name": name});
    for (who, status) in [(&carol, 404), (&bob, 403), (&alice, 200)] {
        let answer = call(
            &server,
            "POST",
            "/api/2.0/mlflow/experiments/update",
            Some(who),
            &rename("renamed"),
        )
        .await;
        assert_eq!(answer.status, status, "{}", answer.body);
        let answer = call(
            &server,
            "POST",
            "/api/2.0/mlflow/runs/create",
            Some(who),
            &json!({"experiment_id": exp}),
        )
        .await;
        assert_eq!(answer.status, status, "{}", answer.body);
    }
    // Default is everyone's to log into, and no one's to change.
    let in_default = call(
        &server,
        "POST",
        "/api/2.0/mlflow/runs/create",
        Some(&carol),
        &json!({"experiment_id": "0"}),
    )
    .await;
    assert_eq!(in_default.status, 200, "{}", in_default.body);
    let rename_default = call(
        &server,
        "POST",
        "/api/2.0/mlflow/experiments/update",
        Some(&carol),
        &json!({"experiment_id": "0", "new_name": "mine"}),
    )
    .await;
    assert_eq!(rename_default.status, 403);
    // A job of carol's cannot log into alice's experiment.
    let job = call(
        &server,
        "POST",
        "/api/trainyard/v1/jobs",
        Some(&carol),
        &json!({"name": "x", "experiment": "renamed", "command": "true"}),
    )
    .await;
    assert_eq!(job.status, 400, "{}", job.body);
    assert_eq!(job.json()["fields"][0]["field"], "experiment");
}

#[tokio::test]
async fn pages_carry_a_nonced_policy_and_every_answer_the_safety_headers() {
    let server = TestServer::start().await;
    let page = server.get("/jobs").await;
    assert_eq!(page.status, 200, "{}", page.body);
    let policy = page.header("content-security-policy").unwrap().to_owned();
    let nonce = policy
        .split("'nonce-")
        .nth(1)
        .and_then(|rest| rest.split('\'').next())
        .expect("the page policy has a nonce")
        .to_owned();
    assert!(nonce.len() >= 16, "{policy}");
    assert!(policy.contains("frame-ancestors 'none'"), "{policy}");
    assert!(
        !policy.contains("script-src 'self' 'unsafe-inline'"),
        "{policy}"
    );
    // Every script of the page carries it.
    let tags: Vec<&str> = page
        .body
        .split("<script")
        .skip(1)
        .map(|rest| rest.split('>').next().unwrap_or(""))
        .collect();
    assert!(!tags.is_empty(), "{}", page.body);
    for tag in tags {
        assert!(tag.contains(&format!("nonce=\"{nonce}\"")), "<script{tag}>");
    }
    // A second page gets another nonce.
    let again = server.get("/jobs").await;
    assert!(
        !again
            .header("content-security-policy")
            .unwrap()
            .contains(&nonce)
    );

    for path in [
        "/jobs",
        "/api/trainyard/v1/me",
        "/healthz",
        "/auth/signed-out",
    ] {
        let answer = server.get(path).await;
        assert_eq!(
            answer.header("x-content-type-options"),
            Some("nosniff"),
            "{path}"
        );
        assert_eq!(answer.header("x-frame-options"), Some("DENY"), "{path}");
        assert!(
            answer
                .header("content-security-policy")
                .is_some_and(|p| p.contains("frame-ancestors 'none'")),
            "{path}"
        );
    }
}

#[tokio::test]
async fn sign_in_and_token_making_are_rate_limited() {
    let server = sso_server().await;
    let mut statuses = Vec::new();
    for _ in 0..trainyard::security::SIGN_IN_PER_MINUTE + 5 {
        statuses.push(server.get("/auth/callback?code=x&state=y").await);
    }
    let limited = statuses
        .iter()
        .find(|r| r.status == 429)
        .expect("a 429 past the limit");
    assert!(limited.header("retry-after").is_some());
    assert_eq!(limited.json()["error_code"], "REQUEST_LIMIT_EXCEEDED");
    assert!(statuses[0].status == 400, "{}", statuses[0].body);

    let p = people(&server).await;
    let mut made = Vec::new();
    for i in 0..trainyard::security::TOKENS_PER_MINUTE + 2 {
        made.push(
            request(
                server.addr,
                "POST",
                "/api/trainyard/v1/tokens",
                &[
                    ("Cookie", &p.bob.cookie),
                    ("Content-Type", "application/json"),
                ],
                json!({"name": format!("t{i}")}).to_string().as_bytes(),
            )
            .await
            .status,
        );
    }
    assert_eq!(made[0], 201);
    assert_eq!(*made.last().unwrap(), 429, "{made:?}");
}

#[tokio::test]
async fn admins_alone_list_people_and_end_their_sessions() {
    let server = sso_server().await;
    let p = people(&server).await;
    let form = |auth: &str, path: &'static str, body: &str| {
        let auth = auth.to_owned();
        let body = body.to_owned();
        let addr = server.addr;
        async move {
            request(
                addr,
                "POST",
                path,
                &[
                    ("Authorization", &auth),
                    ("Content-Type", "application/x-www-form-urlencoded"),
                    ("Accept", "application/json"),
                ],
                body.as_bytes(),
            )
            .await
        }
    };
    let refused = form(&p.alice.bearer(), "/api/list_users", "").await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    let refused = form(&p.alice.bearer(), "/api/end_sessions", "user_id=1").await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    // The admin pages say so once, with a 403, instead of forms that fail.
    for path in ["/admin", "/admin/gpus"] {
        let page = request(
            server.addr,
            "GET",
            path,
            &[("Cookie", &p.alice.cookie)],
            b"",
        )
        .await;
        assert_eq!(page.status, 403, "{path}: {}", page.body);
        assert!(page.body.contains("Admins only"), "{path}: {}", page.body);
        assert!(
            page.body.contains("alice is not one"),
            "{path}: {}",
            page.body
        );
        assert!(!page.body.contains("Add a team"), "{path}: no forms");
        let page = request(
            server.addr,
            "GET",
            path,
            &[("Cookie", &p.admin.cookie)],
            b"",
        )
        .await;
        assert_eq!(page.status, 200, "{path}: {}", page.body);
        assert!(!page.body.contains("Admins only"), "{path}");
    }

    let listed = form(&p.admin.bearer(), "/api/list_users", "").await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    let users = listed.json();
    let bob = users
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["user"]["username"] == "bob")
        .unwrap();
    assert_eq!(bob["live_sessions"], 1);
    assert_eq!(bob["user"]["teams"][0]["name"], "vision");
    let bob_id = bob["user"]["id"].as_i64().unwrap();

    let ended = form(
        &p.admin.bearer(),
        "/api/end_sessions",
        &format!("user_id={bob_id}"),
    )
    .await;
    assert_eq!(ended.status, 200, "{}", ended.body);
    assert_eq!(ended.body, "1");
    let trail = call(
        &server,
        "GET",
        "/api/trainyard/v1/audit?action=sessions.end",
        Some(&p.admin.bearer()),
        &Value::Null,
    )
    .await
    .json();
    assert_eq!(trail[0]["actor"], "root", "{trail}");
    assert_eq!(trail[0]["target"], "bob", "{trail}");
    let after = request(
        server.addr,
        "GET",
        "/api/trainyard/v1/me",
        &[("Cookie", &p.bob.cookie)],
        b"",
    )
    .await;
    assert_eq!(after.status, 401, "bob must sign in again");
    let token = call(
        &server,
        "GET",
        "/api/trainyard/v1/me",
        Some(&p.bob.bearer()),
        &Value::Null,
    )
    .await;
    assert_eq!(token.status, 401, "bob's tokens are revoked too");
}

#[tokio::test]
async fn a_sign_in_is_finished_only_by_the_browser_that_started_it() {
    let server = sso_server().await;
    let store = Store::connect(&server.db.url, 1).await.unwrap();
    for state in ["started-here", "started-elsewhere"] {
        store
            .begin_login(trainyard_store::LoginAttempt {
                state: state.to_owned(),
                nonce: "n".to_owned(),
                browser: trainyard_store::identity::secret_hash("browser-secret"),
                pkce_verifier: "v".repeat(43),
                return_to: "/".to_owned(),
            })
            .await
            .unwrap();
    }
    store.close().await.unwrap();
    // Someone else's callback link, opened in a browser without the cookie.
    let elsewhere = server
        .get("/auth/callback?code=attackers-code&state=started-elsewhere")
        .await;
    assert_eq!(elsewhere.status, 400, "{}", elsewhere.body);
    assert!(
        elsewhere.body.contains("another browser"),
        "{}",
        elsewhere.body
    );
    // The browser that started it gets as far as the provider (down here).
    let here = request(
        server.addr,
        "GET",
        "/auth/callback?code=code&state=started-here",
        &[("Cookie", "trainyard_login=browser-secret")],
        b"",
    )
    .await;
    assert_eq!(here.status, 502, "{}", here.body);
    assert!(
        here.headers.iter().any(
            |(k, v)| k.eq_ignore_ascii_case("set-cookie") && v.starts_with("trainyard_login=;")
        ),
        "the sign-in cookie is cleared: {:?}",
        here.headers
    );
}

#[tokio::test]
async fn the_single_user_admin_stops_working_once_sign_in_is_configured() {
    let server = TestServer::start().await;
    let store = Store::connect(&server.db.url, 1).await.unwrap();
    let local = store.local_admin().await.unwrap();
    let token = store.create_api_token(local.id, "old", None).await.unwrap();
    store.close().await.unwrap();
    let bearer = format!("Bearer {}", token.secret);
    let before = call(
        &server,
        "GET",
        "/api/trainyard/v1/me",
        Some(&bearer),
        &Value::Null,
    )
    .await;
    assert_eq!(before.status, 200, "{}", before.body);
    let (db, data_dir) = server.crash().await;
    let server = TestServer::start_in(
        db,
        data_dir,
        &[
            ("TRAINYARD_OIDC_ISSUER_URL", "http://127.0.0.1:9"),
            ("TRAINYARD_OIDC_CLIENT_ID", "trainyard"),
        ],
    )
    .await;
    let after = call(
        &server,
        "GET",
        "/api/trainyard/v1/me",
        Some(&bearer),
        &Value::Null,
    )
    .await;
    assert_eq!(after.status, 401, "{}", after.body);
}

/// One call of the matrix: what, where, and the answer for the owner's team
/// (reads: 200; changes: 403).
struct Probe {
    method: &'static str,
    path: String,
    body: Vec<u8>,
    changes: bool,
}

impl Probe {
    fn json(method: &'static str, path: &str, body: Value, changes: bool) -> Probe {
        Probe {
            method,
            path: path.to_owned(),
            body: body.to_string().into_bytes(),
            changes,
        }
    }
}

#[tokio::test]
async fn scorers_are_read_by_the_experiments_readers_and_in_default_stay_their_makers() {
    let server = sso_server().await;
    let p = people(&server).await;
    let (alice, bob, carol, admin) = (
        p.alice.bearer(),
        p.bob.bearer(),
        p.carol.bearer(),
        p.admin.bearer(),
    );
    let judge = |words: &str| {
        json!({"name": "j", "builtin_scorer_class": "Guidelines",
               "builtin_scorer_pydantic_data": {"name": "j", "guidelines": [words]}})
        .to_string()
    };
    let register = |who: String, exp: &str, name: &str, words: &str| {
        let body = json!({"experiment_id": exp, "name": name, "serialized_scorer": judge(words)});
        let server = &server;
        async move {
            call(
                server,
                "POST",
                "/api/3.0/mlflow/scorers/register",
                Some(&who),
                &body,
            )
            .await
        }
    };
    let made = call(
        &server,
        "POST",
        "/api/2.0/mlflow/experiments/create",
        Some(&alice),
        &json!({"name": "judged"}),
    )
    .await;
    let exp = made.json()["experiment_id"].as_str().unwrap().to_owned();
    let mine = register(alice.clone(), &exp, "tone", "kind").await;
    assert_eq!(mine.status, 200, "{}", mine.body);
    let scorer_id = mine.json()["scorer_id"].as_str().unwrap().to_owned();
    let config = call(
        &server,
        "PUT",
        "/api/3.0/mlflow/scorers/online-config",
        Some(&alice),
        &json!({"experiment_id": exp, "name": "tone", "sample_rate": 0, "filter_string": "status = 'OK'"}),
    )
    .await;
    assert_eq!(config.status, 200, "{}", config.body);
    assert_eq!(config.json()["config"]["filter_string"], "status = 'OK'");

    // The configuration is shown to whoever reads the experiment only.
    let configs =
        format!("/api/3.0/mlflow/scorers/online-configs?scorer_ids={scorer_id}&scorer_ids=other");
    for (who, seen) in [(&alice, 1), (&bob, 1), (&carol, 0), (&admin, 1)] {
        let got = call(&server, "GET", &configs, Some(who), &Value::Null).await;
        assert_eq!(got.status, 200, "{}", got.body);
        assert_eq!(
            got.json()["configs"].as_array().unwrap().len(),
            seen,
            "{who}"
        );
    }
    // Listing every experiment's scorers shows only those one may read.
    for (who, seen) in [(&bob, 1), (&carol, 0)] {
        let got = call(
            &server,
            "GET",
            "/api/3.0/mlflow/scorers/list",
            Some(who),
            &Value::Null,
        )
        .await;
        assert_eq!(
            got.json()["scorers"].as_array().unwrap().len(),
            seen,
            "{}",
            got.body
        );
        let named = call(
            &server,
            "GET",
            &format!("/api/3.0/mlflow/scorers/list?experiment_ids={exp}&experiment_ids=0"),
            Some(who),
            &Value::Null,
        )
        .await;
        assert_eq!(
            named.json()["scorers"].as_array().unwrap().len(),
            seen,
            "{}",
            named.body
        );
    }

    // In the shared Default experiment anyone registers a new name, and a
    // scorer stays its maker's: another may not add versions, configure or
    // delete it; an admin may.
    let bobs = register(bob.clone(), "0", "shared", "bob's").await;
    assert_eq!(bobs.status, 200, "{}", bobs.body);
    let again = register(bob.clone(), "0", "shared", "bob's too").await;
    assert_eq!(again.json()["version"], 2, "{}", again.body);
    let taken = register(carol.clone(), "0", "shared", "carol's").await;
    assert_eq!(taken.status, 403, "{}", taken.body);
    assert!(taken.body.contains("another name"), "{}", taken.body);
    for (method, path, body) in [
        (
            "PUT",
            "/api/3.0/mlflow/scorers/online-config",
            json!({"experiment_id": "0", "name": "shared", "sample_rate": 0}),
        ),
        (
            "DELETE",
            "/api/3.0/mlflow/scorers/delete",
            json!({"experiment_id": "0", "name": "shared", "version": 1}),
        ),
    ] {
        let refused = call(&server, method, path, Some(&carol), &body).await;
        assert_eq!(refused.status, 403, "{method} {path}: {}", refused.body);
    }
    let read = call(
        &server,
        "GET",
        "/api/3.0/mlflow/scorers/get?experiment_id=0&name=shared",
        Some(&carol),
        &Value::Null,
    )
    .await;
    assert_eq!(read.status, 200, "everyone reads Default: {}", read.body);
    assert_eq!(read.json()["scorer"]["scorer_version"], 2);
    let carols = register(carol.clone(), "0", "carol's own", "hers").await;
    assert_eq!(carols.status, 200, "{}", carols.body);
    let removed = call(
        &server,
        "DELETE",
        "/api/3.0/mlflow/scorers/delete",
        Some(&admin),
        &json!({"experiment_id": "0", "name": "shared"}),
    )
    .await;
    assert_eq!(removed.status, 200, "{}", removed.body);

    // Another's experiment takes no scorer from a teammate.
    let teammate = register(bob.clone(), &exp, "bob's", "x").await;
    assert_eq!(teammate.status, 403, "{}", teammate.body);
    let stranger = register(carol.clone(), &exp, "carol's", "x").await;
    assert_eq!(stranger.status, 404, "{}", stranger.body);
}

#[tokio::test]
async fn every_mlflow_endpoint_answers_the_matrix() {
    let server = sso_server().await;
    let p = people(&server).await;
    let alice = p.alice.bearer();
    let made = call(
        &server,
        "POST",
        "/api/2.0/mlflow/experiments/create",
        Some(&alice),
        &json!({"name": "matrix"}),
    )
    .await;
    let exp = made.json()["experiment_id"].as_str().unwrap().to_owned();
    let run = call(
        &server,
        "POST",
        "/api/2.0/mlflow/runs/create",
        Some(&alice),
        &json!({"experiment_id": exp}),
    )
    .await;
    let run_id = run.json()["run"]["info"]["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let artifact =
        format!("/api/2.0/mlflow-artifacts/artifacts/{exp}/{run_id}/artifacts/notes.txt");
    let model = call(
        &server,
        "POST",
        "/api/2.0/mlflow/logged-models",
        Some(&alice),
        &json!({"experiment_id": exp, "name": "net", "source_run_id": run_id}),
    )
    .await;
    assert_eq!(model.status, 200, "{}", model.body);
    let model_id = model.json()["model"]["info"]["model_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let model_file =
        format!("/api/2.0/mlflow-artifacts/artifacts/{exp}/models/{model_id}/artifacts/MLmodel");
    for (path, body) in [
        ("registered-models/create", json!({"name": "reg"})),
        (
            "model-versions/create",
            json!({"name": "reg", "source": format!("models:/{model_id}")}),
        ),
        (
            "registered-models/alias",
            json!({"name": "reg", "alias": "best", "version": "1"}),
        ),
    ] {
        let made = call(
            &server,
            "POST",
            &format!("/api/2.0/mlflow/{path}"),
            Some(&alice),
            &body,
        )
        .await;
        assert_eq!(made.status, 200, "{path}: {}", made.body);
    }
    let mlflow = |rest: &str| format!("/api/2.0/mlflow/{rest}");
    let trace = call(
        &server,
        "POST",
        "/api/3.0/mlflow/traces",
        Some(&alice),
        &json!({"trace": {"trace_info": {
            "trace_id": "tr-matrix",
            "trace_location": {"type": "MLFLOW_EXPERIMENT", "mlflow_experiment": {"experiment_id": exp}},
            "request_time": "2026-12-02T10:00:00.000Z",
            "execution_duration": "0.5s",
            "state": "OK",
            "tags": {"mlflow.traceName": "answer"},
        }}}),
    )
    .await;
    assert_eq!(trace.status, 200, "{}", trace.body);
    assert_eq!(
        trace.json()["trace"]["trace_info"]["tags"]["mlflow.artifactLocation"],
        format!("mlflow-artifacts:/{exp}/traces/tr-matrix/artifacts")
    );
    let trace_file =
        format!("/api/2.0/mlflow-artifacts/artifacts/{exp}/traces/tr-matrix/artifacts/traces.json");
    let assessments = "/api/3.0/mlflow/traces/tr-matrix/assessments";
    let feedback = json!({"assessment": {
        "assessment_id": "a-matrix",
        "assessment_name": "correct",
        "source": {"source_type": "HUMAN", "source_id": "alice"},
        "feedback": {"value": true},
    }});
    let judged = call(&server, "POST", assessments, Some(&alice), &feedback).await;
    assert_eq!(judged.status, 200, "{}", judged.body);
    assert_eq!(judged.json()["assessment"]["assessment_id"], "a-matrix");
    let dataset = call(
        &server,
        "POST",
        "/api/3.0/mlflow/datasets/create",
        Some(&alice),
        &json!({"name": "matrix questions", "experiment_ids": [exp]}),
    )
    .await;
    assert_eq!(dataset.status, 200, "{}", dataset.body);
    let dataset = format!(
        "/api/3.0/mlflow/datasets/{}",
        dataset.json()["dataset"]["dataset_id"].as_str().unwrap()
    );
    let judge = json!({"name": "j", "instructions_judge_pydantic_data": {"instructions": "Is {{ outputs }} right?", "model": "openai:/gpt-4o"}}).to_string();
    let registered = call(
        &server,
        "POST",
        "/api/3.0/mlflow/scorers/register",
        Some(&alice),
        &json!({"experiment_id": exp, "name": "matrix judge", "serialized_scorer": judge}),
    )
    .await;
    assert_eq!(registered.status, 200, "{}", registered.body);
    let scorers = "/api/3.0/mlflow/scorers";
    let judged_by = format!("experiment_id={exp}&name=matrix%20judge");
    // Each person runs the whole list in this order, so deletes are undone
    // and writes are repeatable.
    let probes = vec![
        Probe::json(
            "POST",
            &format!("{scorers}/register"),
            json!({"experiment_id": exp, "name": "matrix judge", "serialized_scorer": judge}),
            true,
        ),
        Probe::json(
            "GET",
            &format!("{scorers}/list?experiment_id={exp}"),
            Value::Null,
            false,
        ),
        Probe::json(
            "GET",
            &format!("{scorers}/get?{judged_by}"),
            Value::Null,
            false,
        ),
        Probe::json(
            "GET",
            &format!("{scorers}/versions?{judged_by}"),
            Value::Null,
            false,
        ),
        Probe::json(
            "PUT",
            &format!("{scorers}/online-config"),
            json!({"experiment_id": exp, "name": "matrix judge", "sample_rate": 0}),
            true,
        ),
        Probe::json(
            "POST",
            &format!("{scorers}/register"),
            json!({"experiment_id": exp, "name": "gone", "serialized_scorer": judge}),
            true,
        ),
        Probe::json(
            "DELETE",
            &format!("{scorers}/delete"),
            json!({"experiment_id": exp, "name": "gone"}),
            true,
        ),
        Probe::json("GET", &dataset, Value::Null, false),
        Probe::json("GET", &format!("{dataset}/records"), Value::Null, false),
        Probe::json(
            "GET",
            &format!("{dataset}/experiment-ids"),
            Value::Null,
            false,
        ),
        Probe::json(
            "PATCH",
            &format!("{dataset}/tags"),
            json!({"tags": "{\"k\": \"v\"}"}),
            true,
        ),
        Probe::json("DELETE", &format!("{dataset}/tags/k"), Value::Null, true),
        Probe::json(
            "POST",
            &format!("{dataset}/records"),
            json!({"records": "[{\"inputs\": {\"q\": 1}}]"}),
            true,
        ),
        Probe::json(
            "DELETE",
            &format!("{dataset}/records"),
            json!({"dataset_record_ids": ["dr-none"]}),
            true,
        ),
        Probe::json(
            "POST",
            &format!("{dataset}/add-experiments"),
            json!({"experiment_ids": [exp]}),
            true,
        ),
        Probe::json(
            "POST",
            &format!("{dataset}/remove-experiments"),
            json!({"experiment_ids": ["999"]}),
            true,
        ),
        Probe::json(
            "POST",
            assessments,
            json!({"assessment": {"assessment_name": "n", "feedback": {"value": 1}}}),
            true,
        ),
        Probe::json(
            "GET",
            &format!("{assessments}/a-matrix"),
            Value::Null,
            false,
        ),
        Probe::json(
            "PATCH",
            &format!("{assessments}/a-matrix"),
            json!({"assessment": {"rationale": "why"}, "update_mask": "rationale"}),
            true,
        ),
        // Deleting one that is not there is no error, as in MLflow; who may
        // not change the trace is still refused.
        Probe::json(
            "DELETE",
            &format!("{assessments}/a-gone"),
            Value::Null,
            true,
        ),
        Probe::json(
            "POST",
            &mlflow("experiments/set-experiment-tag"),
            json!({"experiment_id": exp, "key": "k", "value": "v"}),
            true,
        ),
        Probe::json(
            "POST",
            &mlflow("experiments/delete-experiment-tag"),
            json!({"experiment_id": exp, "key": "k"}),
            true,
        ),
        Probe::json(
            "POST",
            &mlflow("experiments/delete"),
            json!({"experiment_id": exp}),
            true,
        ),
        Probe::json(
            "POST",
            &mlflow("experiments/restore"),
            json!({"experiment_id": exp}),
            true,
        ),
        Probe::json(
            "POST",
            &mlflow("runs/update"),
            json!({"run_id": run_id, "status": "RUNNING"}),
            true,
        ),
        Probe::json(
            "POST",
            &mlflow("runs/log-parameter"),
            json!({"run_id": run_id, "key": "lr", "value": "0.1"}),
            true,
        ),
        Probe::json(
            "POST",
            &mlflow("runs/set-tag"),
            json!({"run_id": run_id, "key": "t", "value": "v"}),
            true,
        ),
        Probe::json(
            "POST",
            &mlflow("runs/delete-tag"),
            json!({"run_id": run_id, "key": "t"}),
            true,
        ),
        Probe::json(
            "POST",
            &mlflow("runs/log-batch"),
            json!({"run_id": run_id, "metrics": [{"key": "m", "value": 1.0, "timestamp": 1, "step": 0}]}),
            true,
        ),
        Probe::json(
            "POST",
            &mlflow("runs/delete"),
            json!({"run_id": run_id}),
            true,
        ),
        Probe::json(
            "POST",
            &mlflow("runs/restore"),
            json!({"run_id": run_id}),
            true,
        ),
        Probe {
            method: "PUT",
            path: artifact.clone(),
            body: b"hello".to_vec(),
            changes: true,
        },
        Probe::json("GET", &artifact, Value::Null, false),
        Probe::json(
            "POST",
            &mlflow("runs/log-inputs"),
            json!({"run_id": run_id, "datasets": [{"dataset": {"name": "d", "digest": "1", "source_type": "local", "source": "{}"}}], "models": [{"model_id": model_id}]}),
            true,
        ),
        Probe::json(
            "POST",
            &mlflow("runs/outputs"),
            json!({"run_id": run_id, "models": [{"model_id": model_id, "step": 1}]}),
            true,
        ),
        Probe::json(
            "POST",
            &mlflow("logged-models"),
            json!({"experiment_id": exp, "source_run_id": run_id}),
            true,
        ),
        Probe::json(
            "PATCH",
            &mlflow(&format!("logged-models/{model_id}")),
            json!({"status": "LOGGED_MODEL_READY"}),
            true,
        ),
        Probe::json(
            "PATCH",
            &mlflow(&format!("logged-models/{model_id}/tags")),
            json!({"tags": [{"key": "t", "value": "v"}]}),
            true,
        ),
        Probe::json(
            "DELETE",
            &mlflow(&format!("logged-models/{model_id}/tags/t")),
            Value::Null,
            true,
        ),
        Probe::json(
            "POST",
            &mlflow(&format!("logged-models/{model_id}/params")),
            json!({"params": [{"key": "depth", "value": "3"}]}),
            true,
        ),
        Probe::json(
            "POST",
            &mlflow("runs/log-batch"),
            json!({"run_id": run_id, "metrics": [{"key": "acc", "value": 0.5, "timestamp": 1, "step": 0, "model_id": model_id}]}),
            true,
        ),
        Probe::json(
            "GET",
            &mlflow("registered-models/get?name=reg"),
            Value::Null,
            false,
        ),
        Probe::json(
            "POST",
            &mlflow("registered-models/set-tag"),
            json!({"name": "reg", "key": "k", "value": "v"}),
            true,
        ),
        Probe::json(
            "POST",
            &mlflow("registered-models/alias"),
            json!({"name": "reg", "alias": "best", "version": "1"}),
            true,
        ),
        Probe::json(
            "GET",
            &mlflow("registered-models/alias?name=reg&alias=best"),
            Value::Null,
            false,
        ),
        Probe::json(
            "PATCH",
            &mlflow("model-versions/update"),
            json!({"name": "reg", "version": "1", "description": "d"}),
            true,
        ),
        Probe::json(
            "GET",
            &mlflow("model-versions/get-download-uri?name=reg&version=1"),
            Value::Null,
            false,
        ),
        Probe::json(
            "GET",
            "/api/3.0/mlflow/traces/tr-matrix",
            Value::Null,
            false,
        ),
        Probe::json(
            "POST",
            &mlflow("traces/link-prompts"),
            json!({"trace_id": "tr-matrix", "prompt_versions": [{"name": "greet", "version": "1"}]}),
            true,
        ),
        Probe::json(
            "PATCH",
            &mlflow("traces/tr-matrix/tags"),
            json!({"key": "k", "value": "v"}),
            true,
        ),
        Probe {
            method: "PUT",
            path: trace_file.clone(),
            body: b"{}".to_vec(),
            changes: true,
        },
        Probe::json(
            "POST",
            &format!("/api/2.0/mlflow-artifacts/mpu/create/{exp}/{run_id}/artifacts"),
            json!({"path": "/tmp/big.bin", "num_parts": 2}),
            true,
        ),
        Probe::json("GET", &trace_file, Value::Null, false),
        Probe {
            method: "PUT",
            path: model_file.clone(),
            body: b"flavors: {}".to_vec(),
            changes: true,
        },
        Probe::json("GET", &model_file, Value::Null, false),
        Probe::json(
            "GET",
            &mlflow(&format!("logged-models/{model_id}")),
            Value::Null,
            false,
        ),
        Probe {
            method: "DELETE",
            path: model_file.clone(),
            body: Vec::new(),
            changes: true,
        },
        Probe::json(
            "GET",
            &mlflow(&format!("runs/get?run_id={run_id}")),
            Value::Null,
            false,
        ),
        Probe::json(
            "GET",
            &mlflow(&format!("experiments/get?experiment_id={exp}")),
            Value::Null,
            false,
        ),
        Probe {
            method: "DELETE",
            path: artifact.clone(),
            body: Vec::new(),
            changes: true,
        },
    ];
    let carol = p.carol.bearer();
    let bob = p.bob.bearer();
    let admin = p.admin.bearer();
    // (who, a read, a change)
    let people = [
        (None, 401, 401),
        (Some(carol.as_str()), 404, 404),
        (Some(bob.as_str()), 200, 403),
        (Some(alice.as_str()), 200, 200),
        (Some(admin.as_str()), 200, 200),
    ];
    for (who, read, change) in people {
        for probe in &probes {
            // The artifact exists for the read only after a permitted PUT.
            if probe.method == "GET" && probe.path.contains("-artifacts/") && change != 200 {
                continue;
            }
            let mut headers = vec![("Content-Type", "application/json")];
            if let Some(who) = who {
                headers.push(("Authorization", who));
            }
            let answer = request(
                server.addr,
                probe.method,
                &probe.path,
                &headers,
                &probe.body,
            )
            .await;
            let expected = if probe.changes { change } else { read };
            assert_eq!(
                answer.status, expected,
                "{who:?} {} {}: {}",
                probe.method, probe.path, answer.body
            );
        }
    }
    // The team reads the artifact alice put there.
    let put = request(
        server.addr,
        "PUT",
        &artifact,
        &[("Authorization", &alice)],
        b"hello",
    )
    .await;
    assert_eq!(put.status, 200, "{}", put.body);
    for (who, status) in [(&bob, 200), (&carol, 404)] {
        let got = request(
            server.addr,
            "GET",
            &artifact,
            &[("Authorization", who)],
            b"",
        )
        .await;
        assert_eq!(got.status, status, "{}", got.body);
    }
    // The team finds alice's model; another team's search does not.
    let search = json!({"experiment_ids": [exp, "0"]});
    for (who, found) in [(&bob, true), (&carol, false), (&alice, true)] {
        let answer = call(
            &server,
            "POST",
            "/api/2.0/mlflow/logged-models/search",
            Some(who),
            &search,
        )
        .await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert_eq!(answer.body.contains(&model_id), found, "{}", answer.body);
    }
    // The team finds alice's dataset; another team does not, and deleting
    // it is theirs alone (for a stranger it is not there at all).
    for (who, found) in [(&bob, true), (&carol, false), (&alice, true)] {
        let answer = call(
            &server,
            "POST",
            "/api/3.0/mlflow/datasets/search",
            Some(who),
            &json!({"experiment_ids": [exp]}),
        )
        .await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert_eq!(
            answer.body.contains("matrix questions"),
            found,
            "{}",
            answer.body
        );
    }
    // Shown also in an experiment of carol's (by an admin): alice is told
    // only of the experiments she may read.
    let carols = call(
        &server,
        "POST",
        "/api/2.0/mlflow/experiments/create",
        Some(&carol),
        &json!({"name": "carol's questions"}),
    )
    .await;
    let carols = carols.json()["experiment_id"].as_str().unwrap().to_owned();
    let added = call(
        &server,
        "POST",
        &format!("{dataset}/add-experiments"),
        Some(&admin),
        &json!({"experiment_ids": [carols]}),
    )
    .await;
    assert_eq!(added.status, 200, "{}", added.body);
    // Searching by carol's experiment tells alice nothing of it.
    let by_carols = call(
        &server,
        "POST",
        "/api/3.0/mlflow/datasets/search",
        Some(&alice),
        &json!({"experiment_ids": [carols]}),
    )
    .await;
    assert_eq!(by_carols.status, 200, "{}", by_carols.body);
    assert!(
        !by_carols.body.contains("matrix questions"),
        "{}",
        by_carols.body
    );
    // A dataset is shown only in experiments its shower may add runs to:
    // not in a teammate's.
    let bobs = call(
        &server,
        "POST",
        "/api/2.0/mlflow/experiments/create",
        Some(&bob),
        &json!({"name": "bob's questions"}),
    )
    .await;
    let bobs = bobs.json()["experiment_id"].as_str().unwrap().to_owned();
    let refused = call(
        &server,
        "POST",
        &format!("{dataset}/add-experiments"),
        Some(&alice),
        &json!({"experiment_ids": [bobs]}),
    )
    .await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    for (who, shown) in [(&alice, json!([exp])), (&admin, json!([exp, carols]))] {
        let answer = call(
            &server,
            "GET",
            &format!("{dataset}/experiment-ids"),
            Some(who),
            &Value::Null,
        )
        .await;
        assert_eq!(answer.json()["experiment_ids"], shown, "{}", answer.body);
    }
    for (who, status) in [(&carol, 200), (&bob, 403), (&alice, 200)] {
        let answer = call(&server, "DELETE", &dataset, Some(who), &Value::Null).await;
        assert_eq!(answer.status, status, "{}", answer.body);
    }
    let gone = call(&server, "GET", &dataset, Some(&alice), &Value::Null).await;
    assert_eq!(gone.status, 404, "{}", gone.body);
    // Only its owner (or an admin) deletes it; then nobody finds it.
    let path = mlflow(&format!("logged-models/{model_id}"));
    for (who, status) in [(&carol, 404), (&bob, 403), (&alice, 200), (&alice, 404)] {
        let answer = call(&server, "DELETE", &path, Some(who), &Value::Null).await;
        assert_eq!(answer.status, status, "{}", answer.body);
    }
}

/// Deleting traces by age goes through them a page at a time (it once
/// loaded every id and checked each with a query of its own), takes their
/// files with them, and passes over what the caller may not change; one
/// named that the caller sees but may not change is refused.
#[tokio::test]
async fn deleting_traces_pages_through_takes_their_files_and_spares_others() {
    use futures::StreamExt;
    let server = sso_server().await;
    let p = people(&server).await;
    let (alice, bob, admin) = (p.alice.bearer(), p.bob.bearer(), p.admin.bearer());
    let experiment = |who: String, name: &'static str| {
        let server = &server;
        async move {
            let made = call(
                server,
                "POST",
                "/api/2.0/mlflow/experiments/create",
                Some(&who),
                &json!({"name": name}),
            )
            .await;
            made.json()["experiment_id"].as_str().unwrap().to_owned()
        }
    };
    let exp = experiment(alice.clone(), "many traces").await;
    let bobs = experiment(bob.clone(), "bob's traces").await;
    let start = |who: String, exp: String, id: String, time: String| {
        let server = &server;
        async move {
            let started = call(
                server,
                "POST",
                "/api/3.0/mlflow/traces",
                Some(&who),
                &json!({"trace": {"trace_info": {
                    "trace_id": id,
                    "trace_location": {"type": "MLFLOW_EXPERIMENT", "mlflow_experiment": {"experiment_id": exp}},
                    "request_time": time,
                    "state": "OK",
                }}}),
            )
            .await;
            assert_eq!(started.status, 200, "{}", started.body);
        }
    };
    // 1,204 of alice's from 10:00:00 on, one a millisecond; an admin's
    // among them, which alice may not change; one of alice's a day later.
    let old = |i: u32| format!("2026-12-02T10:00:{:02}.{:03}Z", i / 1000, i % 1000);
    futures::stream::iter(0..1204u32)
        .map(|i| start(alice.clone(), exp.clone(), format!("tr-{i:05}"), old(i)))
        .buffer_unordered(8)
        .collect::<Vec<()>>()
        .await;
    start(admin.clone(), exp.clone(), "tr-admin".into(), old(500)).await;
    start(
        alice.clone(),
        exp.clone(),
        "tr-new".into(),
        "2026-12-03T10:00:00.000Z".into(),
    )
    .await;
    start(bob.clone(), bobs.clone(), "tr-bob".into(), old(0)).await;
    let file =
        format!("/api/2.0/mlflow-artifacts/artifacts/{exp}/traces/tr-00000/artifacts/traces.json");
    let put = request(
        server.addr,
        "PUT",
        &file,
        &[("Authorization", alice.as_str())],
        b"{\"spans\": []}",
    )
    .await;
    assert_eq!(put.status, 200, "{}", put.body);
    let folder = server
        .data_dir
        .path()
        .join(format!("artifacts/{exp}/traces/tr-00000"));
    assert!(folder.exists());
    let delete = |body: Value| {
        let server = &server;
        let alice = alice.clone();
        async move {
            call(
                server,
                "POST",
                "/api/2.0/mlflow/traces/delete-traces",
                Some(&alice),
                &body,
            )
            .await
        }
    };
    // 2026-12-02T10:00:05Z: all but the newest.
    let cut = 1_796_205_605_000i64;
    // Bob's, which alice sees (one team): refused by name, passed over by age.
    let named = delete(json!({"experiment_id": bobs, "request_ids": ["tr-bob"]})).await;
    assert_eq!(named.status, 403, "{}", named.body);
    let aged = delete(json!({"experiment_id": bobs, "max_timestamp_millis": cut})).await;
    assert_eq!(aged.json()["traces_deleted"], 0, "{}", aged.body);
    // Her oldest 1,100 (the admin's among them is not hers to delete, and
    // is neither read nor counted).
    let first =
        delete(json!({"experiment_id": exp, "max_timestamp_millis": cut, "max_traces": 1100}))
            .await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.json()["traces_deleted"], 1100, "{}", first.body);
    assert!(!folder.exists(), "a deleted trace's files are gone");
    let rest = delete(json!({"experiment_id": exp, "max_timestamp_millis": cut})).await;
    assert_eq!(rest.json()["traces_deleted"], 104, "{}", rest.body);
    let found = call(
        &server,
        "POST",
        "/api/3.0/mlflow/traces/search",
        Some(&alice),
        &json!({"experiment_ids": [exp], "max_results": 10}),
    )
    .await
    .json();
    let mut left: Vec<&str> = found["traces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["trace_id"].as_str().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["tr-admin", "tr-new"]);
}

#[tokio::test]
async fn the_models_page_links_only_runs_the_viewer_may_read() {
    let server = sso_server().await;
    let p = people(&server).await;
    let post = |who: String, path: &str, body: Value| {
        let server = &server;
        let path = format!("/api/2.0/mlflow/{path}");
        async move {
            let answer = call(server, "POST", &path, Some(&who), &body).await;
            assert_eq!(answer.status, 200, "POST {path}: {}", answer.body);
            answer.json()
        }
    };
    let mut runs = Vec::new();
    for (who, name) in [
        (p.alice.bearer(), "alice-exp"),
        (p.carol.bearer(), "carol-exp"),
    ] {
        let exp =
            post(who.clone(), "experiments/create", json!({"name": name})).await["experiment_id"]
                .as_str()
                .unwrap()
                .to_owned();
        let run =
            post(who, "runs/create", json!({"experiment_id": exp})).await["run"]["info"]["run_id"]
                .as_str()
                .unwrap()
                .to_owned();
        runs.push((run, exp.parse::<i64>().unwrap()));
    }
    post(
        p.alice.bearer(),
        "registered-models/create",
        json!({"name": "shared"}),
    )
    .await;
    // Alice registers her run; an admin adds carol's run to alice's model.
    for (who, (run, _)) in [(p.alice.bearer(), &runs[0]), (p.admin.bearer(), &runs[1])] {
        post(
            who,
            "model-versions/create",
            json!({"name": "shared", "source": format!("runs:/{run}/model"), "run_id": run}),
        )
        .await;
    }
    let models = |who: String| {
        let server = &server;
        async move {
            let answer = request(
                server.addr,
                "POST",
                "/api/get_models",
                &[
                    ("Authorization", who.as_str()),
                    ("Content-Type", "application/x-www-form-urlencoded"),
                ],
                b"",
            )
            .await;
            assert_eq!(answer.status, 200, "{}", answer.body);
            answer.json()
        }
    };
    // Bob (alice's team) sees both versions of the team's model, and the
    // experiment of alice's run only: carol's stays unknown to him.
    let seen = models(p.bob.bearer()).await;
    assert_eq!(seen["versions"].as_array().unwrap().len(), 2, "{seen}");
    assert_eq!(
        seen["run_experiments"],
        json!([[runs[0].0, runs[0].1]]),
        "{seen}"
    );
    let mut all = vec![json!([runs[0].0, runs[0].1]), json!([runs[1].0, runs[1].1])];
    all.sort_by_key(|pair| pair[0].as_str().unwrap().to_owned());
    assert_eq!(
        models(p.admin.bearer()).await["run_experiments"],
        json!(all)
    );
}

#[tokio::test]
async fn webhooks_are_the_admins_alone() {
    let server = sso_server().await;
    let p = people(&server).await;
    let (alice, admin) = (p.alice.bearer(), p.admin.bearer());
    let hooks = "/api/2.0/mlflow/webhooks";
    let body = json!({"name": "ci", "url": "https://8.8.8.8/hook",
                      "events": [{"entity": "MODEL_VERSION", "action": "CREATED"}]});
    let made = call(&server, "POST", hooks, Some(&admin), &body).await;
    assert_eq!(made.status, 200, "{}", made.body);
    let id = made.json()["webhook"]["webhook_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let one = format!("{hooks}/{id}");
    for (method, path, body) in [
        ("POST", hooks.to_owned(), body.clone()),
        ("GET", hooks.to_owned(), Value::Null),
        ("GET", one.clone(), Value::Null),
        ("PATCH", one.clone(), json!({"status": "DISABLED"})),
        ("POST", format!("{one}/test"), json!({})),
        ("DELETE", one.clone(), Value::Null),
    ] {
        let refused = call(&server, method, &path, Some(&alice), &body).await;
        assert_eq!(refused.status, 403, "{method} {path}: {}", refused.body);
        assert!(refused.body.contains("only admins"), "{}", refused.body);
        let anonymous = call(&server, method, &path, None, &body).await;
        assert_eq!(anonymous.status, 401, "{method} {path}: {}", anonymous.body);
    }
    let listed = call(&server, "GET", hooks, Some(&admin), &Value::Null).await;
    assert_eq!(listed.json()["webhooks"][0]["webhook_id"], json!(id));
    assert_eq!(listed.json()["webhooks"][0]["status"], "ACTIVE");
}

/// A run is deleted forever by its owner or an admin alone: a teammate is
/// refused and the run stays; an admin's purge of someone else's run is in
/// the audit trail, the owner's own is not.
#[tokio::test]
async fn a_run_is_deleted_forever_by_its_owner_or_an_admin_alone() {
    let server = sso_server().await;
    let p = people(&server).await;
    let form = |auth: String, path: &'static str, body: String| {
        let addr = server.addr;
        async move {
            request(
                addr,
                "POST",
                path,
                &[
                    ("Authorization", &auth),
                    ("Content-Type", "application/x-www-form-urlencoded"),
                    ("Accept", "application/json"),
                ],
                body.as_bytes(),
            )
            .await
        }
    };
    let alice = p.alice.bearer();
    let made = call(
        &server,
        "POST",
        "/api/2.0/mlflow/experiments/create",
        Some(&alice),
        &json!({"name": "alice-gc"}),
    )
    .await;
    assert_eq!(made.status, 200, "{}", made.body);
    let experiment = made.json()["experiment_id"].as_str().unwrap().to_owned();
    let mut runs = Vec::new();
    for _ in 0..2 {
        let run = call(
            &server,
            "POST",
            "/api/2.0/mlflow/runs/create",
            Some(&alice),
            &json!({"experiment_id": experiment}),
        )
        .await;
        assert_eq!(run.status, 200, "{}", run.body);
        let id = run.json()["run"]["info"]["run_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let deleted = call(
            &server,
            "POST",
            "/api/2.0/mlflow/runs/delete",
            Some(&alice),
            &json!({"run_id": id}),
        )
        .await;
        assert_eq!(deleted.status, 200, "{}", deleted.body);
        runs.push(id);
    }
    let exists = |run: &str| {
        let path = format!("/api/2.0/mlflow/runs/get?run_id={run}");
        let alice = alice.clone();
        let server = &server;
        async move {
            call(server, "GET", &path, Some(&alice), &Value::Null)
                .await
                .status
        }
    };

    // Bob, a teammate, may not; neither one nor all at once.
    let refused = form(
        p.bob.bearer(),
        "/api/purge_run_page",
        format!("run_id={}", runs[0]),
    )
    .await;
    assert!(
        matches!(refused.status, 403 | 404),
        "{}: {}",
        refused.status,
        refused.body
    );
    let all = form(
        p.bob.bearer(),
        "/api/purge_deleted_runs",
        format!("experiment_id={experiment}"),
    )
    .await;
    assert!(
        all.status == 404 || all.body.contains("Deleted 0 runs forever"),
        "{}: {}",
        all.status,
        all.body
    );
    for run in &runs {
        assert_eq!(exists(run).await, 200, "bob removed nothing");
    }

    // The admin may, and the trail says whose run it was; Alice deletes
    // her other one herself, which is hers alone.
    let purged = form(
        p.admin.bearer(),
        "/api/purge_run_page",
        format!("run_id={}", runs[0]),
    )
    .await;
    assert!(purged.status < 400, "{}: {}", purged.status, purged.body);
    assert_eq!(exists(&runs[0]).await, 404);
    let hers = form(
        alice.clone(),
        "/api/purge_deleted_runs",
        format!("experiment_id={experiment}"),
    )
    .await;
    assert_eq!(hers.status, 200, "{}", hers.body);
    assert!(hers.body.contains("Deleted 1 run forever"), "{}", hers.body);
    assert_eq!(exists(&runs[1]).await, 404);
    let trail = call(
        &server,
        "GET",
        "/api/trainyard/v1/audit?action=run.purge",
        Some(&p.admin.bearer()),
        &Value::Null,
    )
    .await;
    assert_eq!(trail.status, 200, "{}", trail.body);
    let trail = trail.json();
    assert_eq!(trail.as_array().unwrap().len(), 1, "{trail}");
    assert_eq!(trail[0]["actor"], "root");
    assert_eq!(trail[0]["target"], format!("run {}", runs[0]));
}
