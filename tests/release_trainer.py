"""The original SEAL release's trainer, as a client of the release protocol.

`ReleaseTrainer` plays what the release's trainer does, as its code documents it
(agentevolver/client/env_client.py, module/env_manager/env_worker.py,
module/agent_flow/agent_flow.py, module/task_manager/rewards/bfcl_dense_env_grader.py,
exp/SEAL.yaml): the same request bodies, the same params, the fields it reads and the
assertions it makes (two messages from /create, exactly one per /step).
`dense_grader_capped` is the release grader's capped partial-credit score.
"""

from __future__ import annotations

from release_protocol_client import SEAL_YAML_BFCL, ReleaseProtocolClient


def seal_params(mode: str = "sample", **bfcl) -> dict:
    return {"is_open_query": False, "rollout_mode": mode, **SEAL_YAML_BFCL, **bfcl}


class ReleaseHTTPError(RuntimeError):
    """What the release's client raises on a non-2xx answer (requests' raise_for_status)."""


class ReleaseTrainer:
    """The release trainer's side of the protocol over any httpx-style client."""

    def __init__(self, http):
        self.http = http

    def post(
        self,
        endpoint: str,
        env_type="default",
        task_id=None,
        instance_id=None,
        messages=None,
        params=None,
    ) -> dict:
        # The release's client always sends all five fields, {} for missing dicts, and
        # env_type "default" unless it names one.
        body = {
            "env_type": env_type,
            "task_id": task_id,
            "instance_id": instance_id,
            "messages": messages or {},
            "params": params or {},
        }
        # The release joins base URL, "/" and the endpoint name as it is given, so its
        # "/get_env_profile" becomes "//get_env_profile".
        response = self.http.post(f"{str(self.http.base_url).rstrip('/')}/{endpoint}", json=body)
        if response.status_code >= 400:
            raise ReleaseHTTPError(f"{response.status_code}: {response.text}")
        return response.json()

    def get_env_profile(self, split: str = "train") -> list:
        return self.post("/get_env_profile", env_type="bfcl", params={"split": split})["data"]

    def create_instance(self, task_id: str, instance_id: str, params: dict) -> dict:
        return self.post("create", "bfcl", task_id, instance_id, params=params)["data"]

    def step(self, instance_id: str, content: str) -> dict:
        action = {"content": content, "role": "assistant"}
        return self.post("step", instance_id=instance_id, messages=action)["data"]

    def evaluate(self, instance_id: str, params: dict | None = None):
        return self.post("evaluate", instance_id=instance_id, params=params)["data"]

    def get_tools_info(self, instance_id: str):
        return self.post("get_info", instance_id=instance_id)["data"]

    def release_instance(self, instance_id: str) -> bool:
        return self.post("release", instance_id=instance_id)["success"]

    def run_episode(self, task_id: str, turns: list[list[str]], params: dict, instance_id: str):
        """EnvWorker.execute + AgentFlow.execute: create, step until terminated (or the
        script runs out, like a context overflow), grade, release."""
        init = self.create_instance(task_id, instance_id, params)
        assert isinstance(init["state"], list) and len(init["state"]) == 2
        assert init["state"][-1]["role"] == "user"
        states = []
        for text in (t for texts in turns for t in texts):
            out = self.step(instance_id, text)
            assert len(out["state"]) == 1  # agent_flow's assertion
            state = out["state"][0]
            state.pop("tool_calls", None)  # agent_flow drops it before saving the message
            states.append(state)
            if out["is_terminated"]:
                break
        result = self.evaluate(instance_id, params={"sparse": False})
        assert self.release_instance(instance_id) is True
        return init, states, out, result


def dense_grader_capped(result: dict, cap: float, weight: float = 1.0) -> tuple[float, list]:
    """The release's bfcl-dense-env grader in its capped mode: the score, and the tags its
    env manager hands to A-Patch and the capability state."""
    accuracy = float(result.get("accuracy", 0.0) or 0.0)
    progress = max(0.0, min(1.0, float(result.get("bfcl_progress", 0.0) or 0.0)))
    score = 1.0 if accuracy >= 1.0 else min(cap, weight * progress)
    info = result.get("bfcl_progress_info", {}) or {}
    return score, list(info.get("failure_tags") or [])


def release_clients(svc) -> tuple[ReleaseProtocolClient, ReleaseTrainer]:
    """(the service `svc` on the release protocol, the release's trainer client over it)."""
    return ReleaseProtocolClient(svc.http, svc.engine), ReleaseTrainer(svc.http)


def plain_prompt(svc, task_id: str) -> str:
    _, data = svc.create(task_id, rollout_mode="validate")
    return data["state"][0]["content"]
