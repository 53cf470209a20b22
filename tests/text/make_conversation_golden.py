#!/usr/bin/env python3
"""Golden values of bigbatch's chat-conversation tokenization (text::ConversationRenderer): for each
fixture tokenizer, chat template and conversation, the ids transformers' apply_chat_template gives
and which of them are the assistant's.

The templates (tests/text/conversations/*.jinja) are written in the style of three families:
ChatML (Qwen2, SmolLM), Llama 3 and Llama 2. Each comes in two forms, the same text rendered:
  NAME.jinja             the template as a tokenizer_config.json would carry it;
  NAME.generation.jinja  the same with {% generation %} around each assistant turn, from which
                         transformers computes the assistant mask (return_assistant_tokens_mask).
The ids are those of the plain template (tokenize=True), and the test checks that the plain and
tagged forms render the same text, so the mask transformers gives for the tagged form is the
golden mask of the plain one. bigbatch computes its mask from the plain template alone.

Run with the wheel's Python (transformers 5.24.0, tokenizers 0.23.3, jinja2 3.1.6):

    ~/.cache/bigbatch/torch-2.15.0/bin/python tests/text/make_conversation_golden.py
"""
import json
import os

import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
TEMPLATES = os.path.join(HERE, "conversations")

# (tokenizer directory relative to tests/, template name)
CASES = [
    ("hf/tiny-qwen2", "chatml"),
    ("hf/tiny-llama", "llama3"),
    ("hf/tokenizers/llama2-bpe-fallback", "llama2"),
]

CONVERSATIONS = [
    {"messages": [{"role": "user", "content": "What is 2+2?"},
                  {"role": "assistant", "content": "4."}]},
    {"messages": [{"role": "system", "content": "You answer briefly."},
                  {"role": "user", "content": "Say hello in German."},
                  {"role": "assistant", "content": "Hallo! Grüße aus Köln."},
                  {"role": "user", "content": "And in Chinese, with an emoji?"},
                  {"role": "assistant", "content": "你好，世界 🙂"}]},
    {"messages": [{"role": "user", "content": "  padded question \n"},
                  {"role": "assistant", "content": "\nA first line.\n\nA second line.  "},
                  {"role": "user", "content": "Thanks"},
                  {"role": "assistant", "content": "You're welcome."}]},
]


def read(name):
    with open(os.path.join(TEMPLATES, name), encoding="utf-8") as f:
        return f.read()


def main():
    cases = []
    for directory, name in CASES:
        tokenizer = transformers.AutoTokenizer.from_pretrained(os.path.join(TESTS, directory))
        plain, tagged = read(name + ".jinja"), read(name + ".generation.jinja")
        for conversation in CONVERSATIONS:
            messages = conversation["messages"]
            if name == "llama2" and messages[0]["role"] == "system":
                continue  # the Llama 2 style template here has no system turn
            text = tokenizer.apply_chat_template(messages, chat_template=plain, tokenize=False)
            text_tagged = tokenizer.apply_chat_template(messages, chat_template=tagged,
                                                        tokenize=False)
            assert text == text_tagged, (name, text, text_tagged)
            ids = tokenizer.apply_chat_template(messages, chat_template=plain, tokenize=True,
                                                return_dict=True)["input_ids"]
            masked = tokenizer.apply_chat_template(messages, chat_template=tagged, tokenize=True,
                                                   return_dict=True,
                                                   return_assistant_tokens_mask=True)
            assert masked["input_ids"] == ids
            prompt = tokenizer.apply_chat_template(messages[:1], chat_template=plain,
                                                   tokenize=False, add_generation_prompt=True)
            cases.append({"tokenizer": directory, "template": name, "messages": messages,
                          "text": text, "generation_prompt_text": prompt, "ids": ids,
                          "assistant_mask": masked["assistant_masks"]})
    out = {"generator": "tests/text/make_conversation_golden.py",
           "transformers": transformers.__version__, "cases": cases}
    with open(os.path.join(TEMPLATES, "golden.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(cases)} cases")


if __name__ == "__main__":
    main()
