from tuner.redact import MASK, redact_argv, redact_env, redact_text, secret_values


def test_argv_secrets_are_masked_in_both_spellings():
    argv = ["vllm", "serve", "m", "--api-key", "sk-abc123", "--hf-token=hf_secret", "--port", "1"]
    assert redact_argv(argv) == ["vllm", "serve", "m", "--api-key", MASK, f"--hf-token={MASK}",
                                 "--port", "1"]


def test_env_and_free_text():
    env = {"HF_TOKEN": "hf_abcdef", "VLLM_CPU_KVCACHE_SPACE": "1"}
    assert redact_env(env) == {"HF_TOKEN": MASK, "VLLM_CPU_KVCACHE_SPACE": "1"}
    secrets = secret_values(["x", "--api-key", "sk-abc123"], env)
    text = "started with key sk-abc123 and token hf_abcdef"
    assert redact_text(text, secrets) == f"started with key {MASK} and token {MASK}"


def test_env_references_are_kept_so_a_resumed_study_can_expand_them():
    assert redact_argv(["--api-key", "${VLLM_KEY}"]) == ["--api-key", "${VLLM_KEY}"]
    assert redact_env({"HF_TOKEN": "$HF_TOKEN"}) == {"HF_TOKEN": "$HF_TOKEN"}


def test_stored_space_masks_literal_secrets():
    from tuner.redact import redact_space
    space = {"name": "s", "engines": {"vllm": {"fixed_args": ["--api-key", "sk-123456"],
                                               "env": {"HF_TOKEN": "hf_abcdef", "X": "1"}}}}
    stored = redact_space(space)
    assert stored["engines"]["vllm"]["fixed_args"] == ["--api-key", MASK]
    assert stored["engines"]["vllm"]["env"] == {"HF_TOKEN": MASK, "X": "1"}
