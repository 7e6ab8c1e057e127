"""The model's tokenizer and chat template, shaped like the Hugging Face tokenizer that vLLM's
llm.get_tokenizer() returns (the methods programs call on it)."""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Union

Conversation = List[Dict[str, Any]]


class Tokenizer:
    def __init__(self, engine) -> None:
        self._engine = engine

    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]:
        return self._engine.encode(text, add_special_tokens)

    def decode(self, token_ids: List[int], skip_special_tokens: bool = False) -> str:
        return self._engine.decode(list(token_ids), skip_special_tokens)

    def __call__(self, text: str, add_special_tokens: bool = True) -> Dict[str, List[int]]:
        return {"input_ids": self.encode(text, add_special_tokens)}

    def apply_chat_template(
        self,
        conversation: Conversation,
        chat_template: Optional[str] = None,
        add_generation_prompt: bool = False,
        tokenize: bool = True,
        **kwargs: Any,
    ) -> Union[str, List[int]]:
        """Renders the conversation with the model's template (as transformers does: the
        defaults add no generation prompt and return token ids). Extra keywords reach the
        template as variables (e.g. enable_thinking)."""
        text = render_chat(self._engine, conversation, chat_template, add_generation_prompt,
                           kwargs)
        if not tokenize:
            return text
        # The template wrote BOS and the special tokens itself.
        return self.encode(text, add_special_tokens=False)


def render_chat(engine, conversation: Conversation, chat_template: Optional[str],
                add_generation_prompt: bool, template_kwargs: Dict[str, Any]) -> str:
    if chat_template is not None:
        # The engine renders the template it loaded (the model's, or LLM(chat_template=...)).
        raise ValueError(
            "a chat_template per call is not supported: pass chat_template to LLM(...) instead")
    return engine.apply_chat_template(json.dumps(list(conversation)), add_generation_prompt,
                                      json.dumps(template_kwargs))
