#!/usr/bin/env python3
"""PEFT LoRA adapters saved by Python's PEFT on the tiny models, and the logits PEFT computes with
them, for bigbatch's models::load_hf_model_with_peft_adapter tests.

Writes tests/hf/peft-tiny-llama/ (r 4, lora_alpha 8, use_rslora, target_modules a list:
q_proj, v_proj, down_proj), tests/hf/peft-tiny-gpt2/ (r 2, lora_alpha 6, fan_in_fan_out for
GPT-2's Conv1D, target_modules a regular expression) and tests/hf/peft-tiny-bert/ (a classifier
of 3 classes, task_type SEQ_CLS: its classifier saved whole, modules_to_save ["classifier",
"score"] as PEFT sets them), each adapter_config.json and adapter_model.safetensors as
save_pretrained writes them, with lora_B and the saved classifier drawn at random (PEFT starts B
at zero, which would hide a wrong scale), and peft-golden.json: per adapter the input ids and
PeftModel's logits (float32, eval mode). base_model_name_or_path is relative to
tests/hf, where this runs. Run with the wheel's Python after installing transformers and peft:

    ~/.cache/bigbatch/torch-2.15.0/bin/python tests/hf/make_peft_golden.py
"""
import json
import os

import peft
import torch
import transformers

import tiny_tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))


def make(base, config, num_labels=0):
    torch.manual_seed(50)
    if num_labels:
        model = transformers.AutoModelForSequenceClassification.from_pretrained(
            base, dtype=torch.float32, num_labels=num_labels)
    else:
        model = transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    model = peft.get_peft_model(model, config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name or "modules_to_save" in name:
                p.normal_(0.0, 0.2)
    model.save_pretrained(f"peft-{base}")
    os.remove(f"peft-{base}/README.md")  # PEFT's model card template
    ids = torch.randint(0, model.config.vocab_size, (1, 10))
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    print(f"peft-{base}: {sum('lora_A' in n for n, _ in model.named_parameters())} adapters")
    return {"input_ids": ids.tolist(), "logits_shape": list(logits.shape),
            "logits": tiny_tokenizers.rounded(logits)}


def main():
    os.chdir(HERE)
    golden = {"transformers": transformers.__version__, "peft": peft.__version__,
              "torch": torch.__version__}
    golden["peft-tiny-llama"] = make("tiny-llama", peft.LoraConfig(
        r=4, lora_alpha=8, use_rslora=True, target_modules=["q_proj", "v_proj", "down_proj"],
        task_type="CAUSAL_LM"))
    golden["peft-tiny-gpt2"] = make("tiny-gpt2", peft.LoraConfig(
        r=2, lora_alpha=6, fan_in_fan_out=True, target_modules=r"transformer\.h\.\d+\.attn\.c_attn",
        task_type="CAUSAL_LM"))
    golden["peft-tiny-bert"] = make("tiny-bert", peft.LoraConfig(
        r=2, lora_alpha=4, target_modules=["query", "value"], task_type="SEQ_CLS"), num_labels=3)
    with open("peft-golden.json", "w") as f:
        json.dump(golden, f)


if __name__ == "__main__":
    main()
