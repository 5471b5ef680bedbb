"""The release protocol (the original release's) as its clients speak it, for the tests of that
protocol (tests/env_service/test_release_*.py): each call checks its status and the envelope's
`success` flag. The service's own behaviour is tested on the native API (conftest.py's
`Episodes`)."""

from __future__ import annotations

import httpx

# exp/SEAL.yaml of the release: env_service.bfcl, which its env worker merges into the
# /create params after is_open_query and rollout_mode.
SEAL_YAML_BFCL = {
    "strict_tool_parser": True,
    "enforce_available_tools": True,
    "tool_prompt_mode": "bfcl_qwen_fc",
    "tool_result_mode": "bfcl_tool_response",
    "observation_lite": {
        "enable": True,
        "apply_to_validation": False,
        "add_required_hint": True,
        "add_type_hint": False,
        "add_enum_hint": True,
        "hide_optional": False,
    },
}

# The release's ToolACE-2-Llama-3.1-8B SEAL run (its history, commit 2fe7844:
# examples/bfcl_grpo_apatch_observation_required_toolace2_llama31_8b.yaml over its base
# configs): env_service.bfcl in the ToolACE mode, observation_lite as in SEAL.yaml. Its
# vanilla run has the same keys with observation_lite off.
TOOLACE_YAML_BFCL = {
    **SEAL_YAML_BFCL,
    "tool_prompt_mode": "toolace_official_prompt",
    "tool_call_parser": "toolace_official_prompt",
    "tool_result_mode": "toolace_official_prompt",
    "terminate_on_parse_error": True,
    "reject_tool_call_with_content": True,
}


class ReleaseProtocolClient:
    def __init__(self, http: httpx.Client, engine=None, prompt: str | None = None):
        self.http = http
        self.engine = engine
        """The service's EnvEngine, when it runs in the test's process."""
        self.prompt = prompt
        """The `prompt` param every create sends (None: the service's default, the paper's)."""

    def post(self, path: str, expect: int = 200, **body) -> dict:
        """POST a release-protocol body; check the status and the `success` flag."""
        response = self.http.post(path, json=body)
        assert response.status_code == expect, response.text
        payload = response.json()
        assert payload["success"] is (expect == 200), payload
        return payload

    def create(self, task_id: str, instance_id: str | None = None, **params) -> tuple[str, dict]:
        if self.prompt is not None:
            params = {"prompt": self.prompt, **params}
        body = {"env_type": "bfcl", "task_id": task_id, "params": params}
        if instance_id is not None:
            body["instance_id"] = instance_id
        data = self.post("/create", **body)["data"]
        return data["info"]["instance_id"], data

    def step(self, instance_id: str, content: str, expect: int = 200) -> dict:
        message = {"role": "assistant", "content": content}
        payload = self.post("/step", expect=expect, instance_id=instance_id, messages=message)
        return payload["data"] if expect == 200 else payload

    def tools(self, instance_id: str) -> list[str]:
        """The tool names `/get_info` lists (its answer is the release's text list)."""
        text = self.post("/get_info", instance_id=instance_id)["data"]
        head, *lines = text.split("\n")
        assert head == "Available tools:" and all(line.startswith("- ") for line in lines), text
        return [line[2:] for line in lines]

    def evaluate(self, instance_id: str, sparse: bool = False):
        return self.post("/evaluate", instance_id=instance_id, params={"sparse": sparse})["data"]

    def play(self, instance_id: str, turns: list[list[str]]) -> list[dict]:
        """Send each turn's texts until the episode ends; returns every step's data."""
        replies = []
        for texts in turns:
            for text in texts:
                replies.append(self.step(instance_id, text))
                if replies[-1]["is_terminated"]:
                    return replies
        return replies


def tool_responses(data: dict) -> list[str]:
    """The tool results of a /step answer (its one message's `<tool_response>` blocks)."""
    content = data["state"][0]["content"]
    return [
        block.split("\n</tool_response>")[0] for block in content.split("<tool_response>\n")[1:]
    ]
