"""Model providers for prompt and agent hooks: pure translators to one wire format each.

Rules of this file:
- A provider builds request bodies and reads replies; it does no I/O (``LlmExecutor`` in
  ``engine.executors.llm`` owns the one httpx client and the deadline).
- Two wire formats: the Anthropic Messages API and OpenAI-compatible chat completions.
  ``provider_from_env`` picks one from the environment.
- A reply that cannot be read raises ``ValueError`` (the executor records it as
  ``llm_transport``); a tool call whose arguments cannot be read is kept with ``problem``
  set, so the model can be told and correct itself.

Example:
    >>> provider_from_env({"HOOKAUDIT_LLM_PROVIDER": "openai"}).name
    'openai'
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from engine.executors.agent_tools import ToolSpec

__all__ = [
    "AnthropicProvider",
    "OpenAIProvider",
    "Provider",
    "ProviderName",
    "Reply",
    "ResponseFormat",
    "ToolCall",
    "provider_from_env",
]

ProviderName = Literal["anthropic", "openai"]
ResponseFormat = Literal["json_schema", "json_object", "none"]

ANTHROPIC_VERSION = "2023-06-01"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call of a reply; ``input`` is None when its arguments could not be read."""

    id: str
    name: str
    input: dict[str, Any] | None
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class Reply:
    """One model answer, read: its text, its tool calls, the message to append."""

    text: str
    calls: tuple[ToolCall, ...]
    message: dict[str, Any]
    usage: dict[str, Any] | None
    stop: str | None


class Provider(Protocol):
    """A wire format: builds request bodies and reads replies (pure, no I/O)."""

    name: str
    url: str

    def headers(self) -> dict[str, str]: ...

    def body(
        self,
        model: str,
        system: str,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[ToolSpec],
        *,
        answer: ToolSpec | None,
        max_tokens: int,
    ) -> dict[str, Any]: ...

    def reply(self, data: Any) -> Reply: ...

    def user(self, text: str) -> dict[str, Any]: ...

    def results(self, results: Sequence[tuple[str, str, bool]]) -> list[dict[str, Any]]: ...

    def answer_text(self, reply: Reply, answer: ToolSpec) -> str: ...


def _unfence(text: str) -> str:
    """The model's answer without surrounding whitespace or one Markdown code fence."""
    text = text.strip()
    m = re.fullmatch(r"```[A-Za-z0-9_-]*\s*\n(.*?)\n?```", text, re.S)
    return m[1].strip() if m else text


def _dict(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{what} is not an object")
    return value


class AnthropicProvider:
    """The Anthropic Messages API (``POST {base}/v1/messages``).

    >>> AnthropicProvider("http://127.0.0.1:9/").url
    'http://127.0.0.1:9/v1/messages'
    """

    name = "anthropic"

    def __init__(
        self, base_url: str, *, api_key: str | None = None, auth_token: str | None = None
    ) -> None:
        self.url = base_url.rstrip("/") + "/v1/messages"
        self._api_key = api_key
        self._auth_token = auth_token

    def headers(self) -> dict[str, str]:
        out = {"anthropic-version": ANTHROPIC_VERSION, "content-type": "application/json"}
        if self._api_key:
            out["x-api-key"] = self._api_key
        if self._auth_token:
            out["authorization"] = f"Bearer {self._auth_token}"
        return out

    def body(
        self,
        model: str,
        system: str,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[ToolSpec],
        *,
        answer: ToolSpec | None,
        max_tokens: int,
    ) -> dict[str, Any]:
        offered = [*tools, answer] if answer is not None else list(tools)
        body: dict[str, Any] = {
            "model": model,
            "max_tokens": max_tokens,
            "system": system,
            "messages": list(messages),
        }
        if offered:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.schema}
                for t in offered
            ]
            body["tool_choice"] = (
                {"type": "tool", "name": answer.name} if answer is not None else {"type": "auto"}
            )
        return body

    def reply(self, data: Any) -> Reply:
        data = _dict(data, "reply")
        content = data.get("content")
        if not isinstance(content, list):
            raise ValueError("reply has no 'content' list")
        texts: list[str] = []
        calls: list[ToolCall] = []
        for n, block in enumerate(content):
            block = _dict(block, f"content[{n}]")
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif block.get("type") == "tool_use":
                call_id = block.get("id")
                name = block.get("name")
                if not isinstance(call_id, str) or not isinstance(name, str):
                    raise ValueError(f"content[{n}]: tool_use without id or name")
                given = block.get("input")
                ok = isinstance(given, dict)
                calls.append(
                    ToolCall(
                        call_id,
                        name,
                        given if ok else None,
                        None if ok else "tool input must be a JSON object",
                    )
                )
        usage = data.get("usage")
        stop = data.get("stop_reason")
        message = {"role": "assistant", "content": content or [{"type": "text", "text": "-"}]}
        return Reply(
            "".join(texts),
            tuple(calls),
            message,
            usage if isinstance(usage, dict) else None,
            stop if isinstance(stop, str) else None,
        )

    def user(self, text: str) -> dict[str, Any]:
        return {"role": "user", "content": text}

    def results(self, results: Sequence[tuple[str, str, bool]]) -> list[dict[str, Any]]:
        blocks = [
            {"type": "tool_result", "tool_use_id": i, "content": text, "is_error": error}
            for i, text, error in results
        ]
        return [{"role": "user", "content": blocks}]

    def answer_text(self, reply: Reply, answer: ToolSpec) -> str:
        for call in reply.calls:
            if call.name == answer.name and call.input is not None:
                return json.dumps(call.input, ensure_ascii=False)
        return _unfence(reply.text)


class OpenAIProvider:
    """OpenAI-compatible chat completions (``POST {base}/chat/completions``): OpenAI,
    vLLM, llama.cpp, Ollama (``http://localhost:11434/v1``).

    >>> OpenAIProvider("http://127.0.0.1:9/v1").url
    'http://127.0.0.1:9/v1/chat/completions'
    """

    name = "openai"

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        response_format: ResponseFormat = "json_schema",
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self._api_key = api_key
        self.response_format = response_format

    def headers(self) -> dict[str, str]:
        out = {"content-type": "application/json"}
        if self._api_key:
            out["authorization"] = f"Bearer {self._api_key}"
        return out

    def body(
        self,
        model: str,
        system: str,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[ToolSpec],
        *,
        answer: ToolSpec | None,
        max_tokens: int,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": model,
            "max_tokens": max_tokens,
            "messages": [{"role": "system", "content": system}, *messages],
        }
        if tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.schema,
                    },
                }
                for t in tools
            ]
            body["tool_choice"] = "auto"
        if answer is not None and self.response_format == "json_schema":
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": answer.name, "schema": answer.schema},
            }
        elif answer is not None and self.response_format == "json_object":
            body["response_format"] = {"type": "json_object"}
        return body

    def reply(self, data: Any) -> Reply:
        data = _dict(data, "reply")
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices:
            raise ValueError("reply has no 'choices'")
        choice = _dict(choices[0], "choices[0]")
        msg = _dict(choice.get("message"), "choices[0].message")
        text = msg.get("content")
        text = text if isinstance(text, str) else ""
        calls: list[ToolCall] = []
        echoed: list[dict[str, Any]] = []
        raw_calls = msg.get("tool_calls") or []
        if not isinstance(raw_calls, list):
            raise ValueError("choices[0].message.tool_calls is not a list")
        for n, raw in enumerate(raw_calls):
            fn = _dict(_dict(raw, f"tool_calls[{n}]").get("function"), f"tool_calls[{n}].function")
            name = fn.get("name")
            if not isinstance(name, str):
                raise ValueError(f"tool_calls[{n}] has no function name")
            call_id = raw.get("id") if isinstance(raw.get("id"), str) else f"call_{n}"
            args = fn.get("arguments")
            parsed: Any = args
            if isinstance(args, str):  # the spec's form; some servers send an object
                try:
                    parsed = json.loads(args) if args.strip() else {}
                except (ValueError, RecursionError):
                    parsed = None
            ok = isinstance(parsed, dict)
            calls.append(
                ToolCall(
                    call_id,
                    name,
                    parsed if ok else None,
                    None if ok else "tool arguments must be a JSON object",
                )
            )
            echoed.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {
                        "name": name,
                        "arguments": args if isinstance(args, str) else json.dumps(args),
                    },
                }
            )
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if echoed:
            message["tool_calls"] = echoed
        usage = data.get("usage")
        stop = choice.get("finish_reason")
        return Reply(
            text,
            tuple(calls),
            message,
            usage if isinstance(usage, dict) else None,
            stop if isinstance(stop, str) else None,
        )

    def user(self, text: str) -> dict[str, Any]:
        return {"role": "user", "content": text}

    def results(self, results: Sequence[tuple[str, str, bool]]) -> list[dict[str, Any]]:
        return [
            {"role": "tool", "tool_call_id": i, "content": f"ERROR: {text}" if error else text}
            for i, text, error in results
        ]

    def answer_text(self, reply: Reply, answer: ToolSpec) -> str:
        for call in reply.calls:  # a server that answered through a tool anyway
            if call.name == answer.name and call.input is not None:
                return json.dumps(call.input, ensure_ascii=False)
        return _unfence(reply.text)


def provider_from_env(
    environ: Mapping[str, str], *, provider: ProviderName | None = None
) -> Provider:
    """The provider the environment configures.

    ``HOOKAUDIT_LLM_PROVIDER`` (``anthropic`` default, or ``openai``). Anthropic:
    ``ANTHROPIC_BASE_URL``, ``ANTHROPIC_API_KEY`` (``x-api-key``), ``ANTHROPIC_AUTH_TOKEN``
    (Bearer). OpenAI-compatible: ``HOOKAUDIT_LLM_BASE_URL`` (else ``OPENAI_BASE_URL``),
    ``HOOKAUDIT_LLM_API_KEY`` (else ``OPENAI_API_KEY``), ``HOOKAUDIT_LLM_RESPONSE_FORMAT``
    (``json_schema`` default, ``json_object`` or ``none`` for servers without it).

    >>> provider_from_env({"HOOKAUDIT_LLM_PROVIDER": "openai"}).url
    'https://api.openai.com/v1/chat/completions'
    """
    name = provider or environ.get("HOOKAUDIT_LLM_PROVIDER", "anthropic").strip().lower()
    if name == "openai":
        formats: dict[str, ResponseFormat] = {
            "json_schema": "json_schema",
            "json_object": "json_object",
            "none": "none",
        }
        fmt = environ.get("HOOKAUDIT_LLM_RESPONSE_FORMAT", "json_schema").strip().lower()
        if fmt not in formats:
            raise ValueError(
                "HOOKAUDIT_LLM_RESPONSE_FORMAT: expected json_schema, json_object or none, "
                f"got {fmt!r}"
            )
        return OpenAIProvider(
            environ.get("HOOKAUDIT_LLM_BASE_URL")
            or environ.get("OPENAI_BASE_URL")
            or "https://api.openai.com/v1",
            api_key=environ.get("HOOKAUDIT_LLM_API_KEY") or environ.get("OPENAI_API_KEY"),
            response_format=formats[fmt],
        )
    if name != "anthropic":
        raise ValueError(f"HOOKAUDIT_LLM_PROVIDER: expected 'anthropic' or 'openai', got {name!r}")
    return AnthropicProvider(
        environ.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com",
        api_key=environ.get("ANTHROPIC_API_KEY") or None,
        auth_token=environ.get("ANTHROPIC_AUTH_TOKEN") or None,
    )
