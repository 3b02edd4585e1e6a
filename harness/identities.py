"""Clients with identities of their own, as controllers have them in a cluster: a ServiceAccount, a Pod that runs as
it, and a token bound to that Pod.

The API server authenticates such a token as `system:serviceaccount:NAMESPACE:NAME`, and its audit events name the
pod in the user's `extra` (`authentication.kubernetes.io/pod-name` and `pod-uid`; on current releases the node's
name and uid too, and the token's `credential-id`). No kubelet runs: the Pod is an object, on a Node that is an object
too, which is all a TokenRequest bound to it needs. The harness's API server runs without the `ServiceAccount`
admission plugin, so the Pod names its ServiceAccount itself (and mounts no token).

    tokens = await provision(admin, [LABELER, ...])       # identity -> its pod-bound token (never print one)
    kubeconfig = cp.kubeconfig_with_token(LABELER.user, tokens[LABELER])
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .kube import Kube, Resource

NODES = Resource("/api/v1", "nodes", "Node", namespaced=False)
PODS = Resource("/api/v1", "pods", "Pod")
SERVICE_ACCOUNTS = Resource("/api/v1", "serviceaccounts", "ServiceAccount")
NODE = "worker-1"  # the (kubelet-less) Node every identity's Pod is bound to
TOKEN_SECONDS = 3600  # a bound token's lifetime (the API server's minimum is 10 minutes)
MANAGER = "fightwatch-harness"


@dataclass(frozen=True)
class Identity:
    """A client's identity: ServiceAccount `name` in `namespace`, running in Pod `pod` of that namespace."""

    namespace: str
    name: str
    pod: str
    user_agent: str = ""  # its User-Agent; "" for a client that sends its own (the release's kubectl)

    @property
    def user(self) -> str:
        """The user name the API server authenticates its token as."""
        return f"system:serviceaccount:{self.namespace}:{self.name}"

    @property
    def pod_ref(self) -> str:
        """`namespace/name` of its Pod, as fightwatch names a client's pod."""
        return f"{self.namespace}/{self.pod}"


def _pod(identity: Identity) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": identity.pod, "namespace": identity.namespace, "labels": {"app": identity.name}},
        "spec": {
            "serviceAccountName": identity.name,
            "nodeName": NODE,
            "containers": [{"name": identity.name, "image": "registry.k8s.io/pause:3.10"}],
            # kube-controller-manager, where it runs, taints a Node whose kubelet never reports NoExecute: the Pod
            # (and with it its tokens) stays
            "tolerations": [{"operator": "Exists"}],
        },
    }


async def provision(admin: Kube, identities: Iterable[Identity]) -> dict[Identity, str]:
    """Each identity's namespace, ServiceAccount and Pod (on `NODE`), and a token bound to the Pod: their tokens.
    What they may do is for the caller to grant (RBAC subjects of kind ServiceAccount)."""
    await admin.ensure(NODES.path(), {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}, manager=MANAGER)
    tokens: dict[Identity, str] = {}
    for identity in identities:
        ns = identity.namespace
        await admin.ensure_namespace(ns, manager=MANAGER)
        account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": identity.name, "namespace": ns}}
        await admin.ensure(SERVICE_ACCOUNTS.path(ns), account, manager=MANAGER)
        pod = await admin.ensure(PODS.path(ns), _pod(identity), manager=MANAGER)
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "expirationSeconds": TOKEN_SECONDS,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": identity.pod,
                    "uid": pod["metadata"]["uid"],
                },
            },
        }
        answer = await admin.request("POST", SERVICE_ACCOUNTS.path(ns, identity.name, "token"), body=request)
        tokens[identity] = answer["status"]["token"]
    return tokens
