//! Node agents on Kubernetes prove which node they run on with their own
//! ServiceAccount token, rather than with a Trainyard token an admin makes
//! for each node: the chart's DaemonSet mounts a projected token of the
//! agents' account, bound to the agent's pod and meant for Trainyard alone
//! (audience [`AGENT_AUDIENCE`]), which the kubelet renews. The server asks
//! the API (a TokenReview) whether the token is valid, whose it is and which
//! node its pod runs on; a token of another account, for another audience,
//! or not bound to a pod on a node is refused.

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, TokenReviewStatus};
use kube::Client;
use kube::api::{Api, PostParams};

/// The audience of agents' tokens: a token meant for the API server (or
/// anything else) is not taken, and one meant for Trainyard is of no use
/// elsewhere.
pub const AGENT_AUDIENCE: &str = "trainyard-agent";

/// Where the API puts the node of the pod that a token is bound to
/// (Kubernetes 1.30 and later).
pub const NODE_NAME_EXTRA: &str = "authentication.kubernetes.io/node-name";

/// Checks agents' ServiceAccount tokens with the API.
#[derive(Clone)]
pub struct AgentReviewer {
    reviews: Api<TokenReview>,
    /// `system:serviceaccount:<namespace>:<name>`.
    username: String,
}

impl AgentReviewer {
    /// Takes the tokens of the ServiceAccount `account` (`namespace/name`).
    pub fn new(client: Client, account: &str) -> Result<AgentReviewer, String> {
        let (namespace, name) = parse_account(account)?;
        Ok(AgentReviewer {
            reviews: Api::all(client),
            username: format!("system:serviceaccount:{namespace}:{name}"),
        })
    }

    /// The node whose agent holds `token`; Ok(None) when the API does not
    /// take it as an agent's. Err: the API could not be asked.
    pub async fn node_of(&self, token: &str) -> Result<Option<String>, String> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_owned(),
                audiences: Some(vec![AGENT_AUDIENCE.to_owned()]),
            },
            ..Default::default()
        };
        let answer = self
            .reviews
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| match e {
                kube::Error::Api(status) => format!(
                    "the TokenReview was refused: {} ({}); the server's account needs `create` on tokenreviews (the chart's ClusterRole)",
                    status.message, status.code
                ),
                other => format!("the TokenReview failed: {other}"),
            })?;
        Ok(answer
            .status
            .as_ref()
            .and_then(|s| agent_node(s, &self.username)))
    }
}

/// `namespace/name` of a ServiceAccount, both DNS labels.
pub fn parse_account(account: &str) -> Result<(&str, &str), String> {
    let bad = || {
        format!(
            "`{account}` is not a ServiceAccount; write namespace/name (the chart's agents: <release namespace>/<release>-agent)"
        )
    };
    let (namespace, name) = account.trim().split_once('/').ok_or_else(bad)?;
    let label = |s: &str| {
        !s.is_empty()
            && s.len() <= 253
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && !s.starts_with(['-', '.'])
            && !s.ends_with(['-', '.'])
    };
    if label(namespace) && label(name) {
        Ok((namespace, name))
    } else {
        Err(bad())
    }
}

/// The node of an agent's token from the API's review: authenticated, for
/// our audience, of the agents' account, bound to a pod on exactly one node.
pub fn agent_node(status: &TokenReviewStatus, username: &str) -> Option<String> {
    if status.authenticated != Some(true) {
        return None;
    }
    // The API answers with the audiences the token is valid for among those
    // asked; none at all means it was not checked against ours.
    if !status
        .audiences
        .as_ref()
        .is_some_and(|a| a.iter().any(|a| a == AGENT_AUDIENCE))
    {
        return None;
    }
    let user = status.user.as_ref()?;
    if user.username.as_deref() != Some(username) {
        return None;
    }
    match user.extra.as_ref()?.get(NODE_NAME_EXTRA)?.as_slice() {
        [node] if !node.is_empty() => Some(node.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::authentication::v1::UserInfo;
    use std::collections::BTreeMap;

    const AGENTS: &str = "system:serviceaccount:trainyard:trainyard-agent";

    fn status(username: &str, audiences: &[&str], nodes: &[&str]) -> TokenReviewStatus {
        let mut extra = BTreeMap::new();
        if !nodes.is_empty() {
            extra.insert(
                NODE_NAME_EXTRA.to_owned(),
                nodes.iter().map(|n| n.to_string()).collect(),
            );
        }
        TokenReviewStatus {
            authenticated: Some(true),
            audiences: Some(audiences.iter().map(|a| a.to_string()).collect()),
            user: Some(UserInfo {
                username: Some(username.to_owned()),
                extra: Some(extra),
                ..Default::default()
            }),
            error: None,
        }
    }

    #[test]
    fn only_the_agents_bound_tokens_for_trainyard_name_a_node() {
        let ok = status(AGENTS, &[AGENT_AUDIENCE], &["gpu-7"]);
        assert_eq!(agent_node(&ok, AGENTS).as_deref(), Some("gpu-7"));

        let mut refused = ok.clone();
        refused.authenticated = Some(false);
        assert_eq!(agent_node(&refused, AGENTS), None);
        // Another account of the cluster (a job's pod, say).
        let other = status(
            "system:serviceaccount:trainyard:default",
            &[AGENT_AUDIENCE],
            &["gpu-7"],
        );
        assert_eq!(agent_node(&other, AGENTS), None);
        // A token for the API server, not for Trainyard.
        let api = status(AGENTS, &["https://kubernetes.default.svc"], &["gpu-7"]);
        assert_eq!(agent_node(&api, AGENTS), None);
        let mut unchecked = ok.clone();
        unchecked.audiences = None;
        assert_eq!(agent_node(&unchecked, AGENTS), None);
        // Not bound to a pod on a node (`kubectl create token` alone).
        assert_eq!(
            agent_node(&status(AGENTS, &[AGENT_AUDIENCE], &[]), AGENTS),
            None
        );
        assert_eq!(
            agent_node(&status(AGENTS, &[AGENT_AUDIENCE], &["a", "b"]), AGENTS),
            None
        );
    }

    #[test]
    fn accounts_are_namespace_and_name() {
        assert_eq!(
            parse_account(" trainyard/trainyard-agent ").unwrap(),
            ("trainyard", "trainyard-agent")
        );
        for bad in [
            "trainyard",
            "/agent",
            "trainyard/",
            "Trainyard/agent",
            "a/b c",
            "a/-b",
        ] {
            let err = parse_account(bad).unwrap_err();
            assert!(err.contains("namespace/name"), "{bad}: {err}");
        }
    }
}
