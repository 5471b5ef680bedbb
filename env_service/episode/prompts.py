"""What an episode shows the model: its system prompt's sections, tool docs and questions,
as data (the native API) and as the release protocol's text (env_service/release_texts.py).

The renders of a task's docs are cached by task id: an episode plays a shipped task
(seal.bfcl.tasks.load_task), and serialising its 20-30 KB of tool signatures on every
create was most of an episode's creation cost.
"""

from __future__ import annotations

import functools

from env_service import interface_layers, release_texts
from seal.bfcl.multi_turn import BfclTask
from seal.bfcl.tasks import load_task
from seal.service_contract import InterfaceSettings


@functools.lru_cache(maxsize=4096)
def _cued_tools(task_id: str, prompt_name: str, hints: bool) -> tuple[dict, ...]:
    cue = interface_layers.TEXTS[prompt_name].cue
    return tuple(cue(d, hints) for d in load_task(task_id).tools)


def first_tools(task_id: str, prompt_name: str, cues: bool, hints: bool) -> list[dict]:
    """The docs of the tools available from turn 0, with the cues when on (cued once per
    task and settings)."""
    if not cues:
        return load_task(task_id).tools
    return list(_cued_tools(task_id, prompt_name, hints))


@functools.lru_cache(maxsize=4096)
def release_system_prompt(
    task_id: str,
    release_text: str,
    prompt_name: str,
    cues: bool,
    hints: bool,
    sections: tuple[str, ...],
) -> str:
    """The release protocol's system message, rendered once per task and settings (release_text
    text, prompt, cues, type hints, sections)."""
    docs = first_tools(task_id, prompt_name, cues, hints)
    return release_texts.RELEASE_TEXTS[release_text].system(docs, sections)


def extra_sections(
    texts: interface_layers.PromptTexts,
    layers: InterfaceSettings,
    guidelines: list[tuple[str, str]],
) -> list[str]:
    """The layers' sections of the system prompt: the constraint note, the guidelines."""
    sections = []
    if layers.schema_cues:
        sections.append(texts.note)
    if section := texts.guideline_section(guidelines):
        sections.append(section)
    return sections


def turn_messages(
    task: BfclTask, turn: int, texts: interface_layers.PromptTexts, layers: InterfaceSettings
) -> list[dict]:
    """The user messages that open `turn` (observation messages, as data): its question,
    or a holdout turn's revealed docs (cued when the prompt cues revealed docs)."""
    revealed = task.held_out.get(turn)
    if not revealed:
        return [{"role": m["role"], "content": m["content"]} for m in task.questions[turn]]
    if layers.schema_cues and texts.cue_revealed:
        return [
            {
                "role": "user",
                "content": "",
                "tools": [texts.cue(d, layers.type_hints) for d in revealed],
            }
        ]
    return [{"role": "user", "content": "", "tools": list(revealed)}]


def interface(layers: InterfaceSettings, guidelines: list[tuple[str, str]]) -> dict:
    """The layers on and the guidelines shown (service_contract.EpisodeInterface)."""
    return {
        "schema_cues": layers.schema_cues,
        "type_hints": layers.schema_cues and layers.type_hints,
        "recovery_feedback": layers.recovery_feedback,
        "guidelines": layers.guidelines,
        "shown": [{"tag": tag, "text": text} for tag, text in guidelines],
    }
