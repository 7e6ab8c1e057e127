"""The pagoda package's API beyond the vLLM examples: vLLM's SamplingParams defaults, prompt
forms, errors, streaming, the tokenizer, and the GIL released while generating.

    PAGODA_TEST_MODEL=DIR python3 -m unittest test_api
"""

import _thread
import os
import subprocess
import sys
import threading
import time
import unittest

import pagoda
from pagoda import LLM, SamplingParams

MODEL = os.environ["PAGODA_TEST_MODEL"]
GREEDY = SamplingParams(temperature=0, max_tokens=12)


class SamplingParamsTest(unittest.TestCase):
    def test_defaults_are_vllms(self):
        # vllm.SamplingParams() as vLLM's documentation lists its fields.
        expected = {
            "n": 1, "presence_penalty": 0.0, "frequency_penalty": 0.0,
            "repetition_penalty": 1.0, "temperature": 1.0, "top_p": 1.0, "top_k": 0,
            "min_p": 0.0, "seed": None, "stop": [], "stop_token_ids": [], "ignore_eos": False,
            "max_tokens": 16, "min_tokens": 0, "logprobs": None, "prompt_logprobs": None,
            "skip_special_tokens": True, "include_stop_str_in_output": False,
            "logit_bias": None, "allowed_token_ids": None, "bad_words": None,
        }
        p = SamplingParams()
        for name, value in expected.items():
            self.assertEqual(getattr(p, name), value, name)

    def test_stop_string_becomes_a_list(self):
        self.assertEqual(SamplingParams(stop="\n").stop, ["\n"])


class LLMTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.llm = LLM(model=MODEL, max_num_seqs=8)

    def test_outputs_carry_vllms_attributes(self):
        [out] = self.llm.generate("Hello there", GREEDY)
        self.assertEqual(out.prompt, "Hello there")
        self.assertEqual(out.prompt_token_ids, self.llm.get_tokenizer().encode("Hello there"))
        self.assertTrue(out.finished)
        completion = out.outputs[0]
        self.assertEqual(completion.index, 0)
        self.assertEqual(len(completion.token_ids), 12)
        self.assertEqual(completion.finish_reason, "length")
        self.assertIsNone(completion.stop_reason)
        self.assertIsNone(completion.cumulative_logprob)
        self.assertIsNone(completion.logprobs)
        self.assertTrue(completion.finished())

    def test_token_prompt_generates_what_its_text_does(self):
        ids = self.llm.get_tokenizer().encode("A token prompt")
        by_text, by_ids = self.llm.generate(["A token prompt", {"prompt_token_ids": ids}], GREEDY)
        self.assertEqual(by_ids.prompt_token_ids, ids)
        self.assertIsNone(by_ids.prompt)
        self.assertEqual(by_ids.outputs[0].token_ids, by_text.outputs[0].token_ids)

    def test_outputs_in_prompt_order_with_a_params_list(self):
        prompts = [f"Prompt number {i}" for i in range(5)]
        params = [SamplingParams(temperature=0, max_tokens=2 + i) for i in range(5)]
        outputs = self.llm.generate(prompts, params)
        self.assertEqual([o.prompt for o in outputs], prompts)
        self.assertEqual([len(o.outputs[0].token_ids) for o in outputs], [2, 3, 4, 5, 6])
        with self.assertRaisesRegex(ValueError, "lengths of prompts and sampling_params"):
            self.llm.generate(prompts, params[:2])

    def test_n_samples(self):
        [out] = self.llm.generate("Two samples", SamplingParams(n=2, seed=3, max_tokens=6))
        self.assertEqual([c.index for c in out.outputs], [0, 1])

    def test_logprobs(self):
        [out] = self.llm.generate("Logprobs", SamplingParams(temperature=0, max_tokens=4,
                                                             logprobs=2, prompt_logprobs=1))
        completion = out.outputs[0]
        self.assertEqual(len(completion.logprobs), 4)
        total = 0.0
        for token_id, position in zip(completion.token_ids, completion.logprobs):
            self.assertIn(token_id, position)
            self.assertEqual(position[token_id].rank, 1)  # greedy picks the most likely
            total += position[token_id].logprob
        self.assertAlmostEqual(completion.cumulative_logprob, total, places=4)
        self.assertIsNone(out.prompt_logprobs[0])
        self.assertEqual(len(out.prompt_logprobs), len(out.prompt_token_ids))

    def test_engine_errors_are_python_exceptions_with_the_engines_message(self):
        with self.assertRaisesRegex(pagoda.Error, "temperature"):
            self.llm.generate("x", SamplingParams(temperature=-1.0))
        with self.assertRaises(ValueError):  # pagoda.Error is a ValueError, as vLLM raises
            self.llm.generate("x", SamplingParams(max_tokens=0))
        # The engine is left empty and usable.
        self.assertEqual(len(self.llm.generate("still works", GREEDY)), 1)

    def test_logit_bias_allowed_token_ids_and_bad_words(self):
        [free] = self.llm.generate("Constrained", GREEDY)
        forced = next(i for i in range(300, 400) if i not in free.outputs[0].token_ids)
        [out] = self.llm.generate("Constrained", SamplingParams(
            temperature=0, max_tokens=12, logit_bias={str(forced): 100}))
        self.assertEqual(out.outputs[0].token_ids, [forced] * 12)
        [out] = self.llm.generate("Constrained", SamplingParams(
            seed=1, max_tokens=12, allowed_token_ids=[17, 250]))
        self.assertTrue(set(out.outputs[0].token_ids) <= {17, 250}, out.outputs[0].token_ids)
        tokenizer = self.llm.get_tokenizer()
        first = next(w for w in (tokenizer.decode([t]).strip() for t in free.outputs[0].token_ids)
                     if w)
        [out] = self.llm.generate("Constrained", SamplingParams(
            temperature=0, max_tokens=12, bad_words=[first]))
        banned = {tuple(tokenizer.encode(w, add_special_tokens=False)) for w in (first, " " + first)}
        ids = out.outputs[0].token_ids
        for word in banned:
            self.assertFalse(any(tuple(ids[i:i + len(word)]) == word for i in range(len(ids))))
        with self.assertRaisesRegex(pagoda.Error, "logit_bias"):
            self.llm.generate("x", SamplingParams(logit_bias={5: 150}))
        with self.assertRaisesRegex(pagoda.Error, "allowed_token_ids"):
            self.llm.generate("x", SamplingParams(allowed_token_ids=[1 << 30]))

    def test_stream_ends_with_what_generate_returns(self):
        [expected] = self.llm.generate("Streaming", GREEDY)
        steps = list(self.llm.stream("Streaming", GREEDY))
        self.assertGreater(len(steps), 1)
        self.assertTrue(steps[-1].finished)
        self.assertFalse(steps[0].finished)
        self.assertEqual(steps[-1].outputs[0].token_ids, expected.outputs[0].token_ids)
        deltas = list(self.llm.stream("Streaming", GREEDY, delta=True))
        self.assertEqual(sum((d.outputs[0].token_ids for d in deltas), []),
                         expected.outputs[0].token_ids)
        self.assertEqual("".join(d.outputs[0].text for d in deltas), expected.outputs[0].text)

    def test_delta_stream_concatenates_to_generate_for_every_sample(self):
        # Sampled (seeded) so that the two samples differ, a stop string so that held-back text
        # must come out right, logprobs so that cumulative_logprob must stay a running sum.
        params = SamplingParams(n=2, temperature=0.9, seed=11, max_tokens=14, logprobs=2,
                                stop=["e"], include_stop_str_in_output=True)
        [expected] = self.llm.generate("Delta streams", params)
        deltas = list(self.llm.stream("Delta streams", params, delta=True))
        self.assertTrue(deltas[-1].finished)
        for d in deltas:
            self.assertEqual(d.prompt_token_ids, expected.prompt_token_ids)
        for want in expected.outputs:
            got = [o for d in deltas for o in d.outputs if o.index == want.index]
            self.assertEqual("".join(o.text for o in got), want.text)
            self.assertEqual(sum((o.token_ids for o in got), []), want.token_ids)
            self.assertEqual(sum((o.logprobs for o in got), []), want.logprobs)
            self.assertAlmostEqual(got[-1].cumulative_logprob, want.cumulative_logprob, places=4)
            self.assertEqual(got[-1].finish_reason, want.finish_reason)
            self.assertEqual(got[-1].stop_reason, want.stop_reason)

    def test_leaving_a_stream_early_aborts_its_requests(self):
        for _ in self.llm.stream(["a", "b"], SamplingParams(max_tokens=50, ignore_eos=True)):
            break
        self.assertEqual(len(self.llm.generate("after the stream", GREEDY)), 1)

    def test_one_call_at_a_time(self):
        stream = self.llm.stream("first", GREEDY)
        next(stream)
        with self.assertRaisesRegex(RuntimeError, "busy"):
            self.llm.generate("second", GREEDY)
        stream.close()  # aborts the first
        self.assertEqual(len(self.llm.generate("second", GREEDY)), 1)

    def test_tokenizer(self):
        tokenizer = self.llm.get_tokenizer()
        text = "Hello, world"
        self.assertEqual(tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)), text)
        conversation = [{"role": "user", "content": "Hi"}]
        prompt = tokenizer.apply_chat_template(conversation, tokenize=False,
                                               add_generation_prompt=True)
        [out] = self.llm.chat(conversation, GREEDY)
        self.assertEqual(out.prompt, prompt)
        self.assertEqual(out.prompt_token_ids,
                         tokenizer.apply_chat_template(conversation, add_generation_prompt=True))

    def test_generation_releases_the_gil(self):
        counted = 0
        running = True

        def count():
            nonlocal counted
            while running:
                counted += 1

        thread = threading.Thread(target=count)
        thread.start()
        time.sleep(0.05)
        before = counted
        start = time.monotonic()
        self.llm.generate(["GIL"] * 4, SamplingParams(max_tokens=64, ignore_eos=True))
        elapsed = time.monotonic() - start
        during = counted - before
        running = False
        thread.join()
        # Holding the GIL for the whole batch would leave the counter where it was.
        self.assertGreater(during, 1000, f"counter moved {during} in {elapsed:.3f} s")

    def test_ctrl_c_stops_a_generate_and_leaves_the_llm_usable(self):
        timer = threading.Timer(0.02, _thread.interrupt_main)  # as if SIGINT arrived
        timer.start()
        start = time.monotonic()
        with self.assertRaises(KeyboardInterrupt):
            self.llm.generate(["interrupted"] * 8, SamplingParams(max_tokens=480, ignore_eos=True))
        timer.join()
        self.assertLess(time.monotonic() - start, 5.0)
        self.assertEqual(len(self.llm.generate("after Ctrl-C", GREEDY)[0].outputs[0].token_ids), 12)


class ConstructionTest(unittest.TestCase):
    def test_parallel_sizes_must_be_positive_ints(self):
        with self.assertRaisesRegex(ValueError, "pipeline_parallel_size must be a positive int"):
            LLM(model=MODEL, pipeline_parallel_size=0)
        with self.assertRaisesRegex(ValueError, "tensor_parallel_size must be a positive int"):
            LLM(model=MODEL, tensor_parallel_size=1.5)

    def test_more_stages_than_layers_is_the_engines_error(self):
        # The tiny preset has 2 layers; the error comes from the engine. In a process of its
        # own: an LLM with several ranks sets this process's OpenMP thread count to its share.
        code = ("import pagoda\n"
                "try:\n"
                f"    pagoda.LLM(model={MODEL!r}, pipeline_parallel_size=3)\n"
                "except pagoda.Error as e:\n"
                "    print(e)\n")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=120)
        self.assertIn("2 layers do not fill 3 stages", done.stdout, done.stderr)

    def test_missing_model_names_the_path(self):
        with self.assertRaisesRegex(pagoda.Error, "no-such-model"):
            LLM(model=os.path.join(MODEL, "no-such-model"))

    def test_max_tokens_none_fills_the_context(self):
        llm = LLM(model=MODEL, max_model_len=32, kv_cache_space="1MiB")
        [out] = llm.generate("Fill", SamplingParams(max_tokens=None, ignore_eos=True))
        self.assertEqual(len(out.prompt_token_ids) + len(out.outputs[0].token_ids), 32)


    def test_speculative_config_dict_keeps_greedy_outputs(self):
        spec = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}
        prompt = "one two three one two three one two three one two"
        plain = LLM(model=MODEL).generate(prompt, GREEDY)[0].outputs[0].token_ids
        speculative = LLM(model=MODEL, speculative_config=spec)
        self.assertEqual(speculative.generate(prompt, GREEDY)[0].outputs[0].token_ids, plain)

    def test_draft_model_keeps_greedy_outputs_and_accepts_itself(self):
        # The model as its own draft: every draft is accepted, the output is plain decoding's.
        spec = {"method": "draft_model", "model": MODEL, "num_speculative_tokens": 3}
        prompt = "A draft model proposes"
        plain = LLM(model=MODEL).generate(prompt, GREEDY)[0].outputs[0].token_ids
        speculative = LLM(model=MODEL, speculative_config=spec)
        self.assertEqual(speculative.generate(prompt, GREEDY)[0].outputs[0].token_ids, plain)

    def test_speculative_config_names_the_bad_key_and_the_unsupported_method(self):
        with self.assertRaisesRegex(pagoda.Error, '"lookahead"'):
            LLM(model=MODEL, speculative_config={"method": "ngram", "num_speculative_tokens": 2,
                                                 "lookahead": 1})
        with self.assertRaisesRegex(pagoda.Error, '"eagle" is not supported yet'):
            LLM(model=MODEL, speculative_config={"method": "eagle", "num_speculative_tokens": 1})
        with self.assertRaisesRegex(pagoda.Error, "multi-token-prediction layers"):
            LLM(model=MODEL, speculative_config={"method": "mtp", "num_speculative_tokens": 1})


# Last (unittest runs classes by name): rank 0's engine gives OpenMP its share of the CPUs, for the
# whole process, which would slow the other classes' timing checks.
class TensorParallelTest(unittest.TestCase):
    def test_tensor_parallel_generates_as_one_process(self):
        # Rank 1 is a process of its own; greedy tokens are those of one process. (The tiny
        # preset has 2 KV heads: 2 ranks at most.)
        prompts = ["Once upon a time", "The sky"]
        params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
        one = [o.outputs[0].token_ids for o in LLM(model=MODEL).generate(prompts, params)]
        llm = LLM(model=MODEL, tensor_parallel_size=2)
        self.assertEqual([o.outputs[0].token_ids for o in llm.generate(prompts, params)], one)
        followers = llm._followers
        self.assertEqual(len(followers), 1)
        del llm  # rank 0's engine shuts down: the follower leaves
        self.assertEqual(followers[0].wait(timeout=30), 0)

    def test_pipeline_parallel_generates_as_one_process(self):
        # pipeline_parallel_size=2: the tiny preset's 2 layers, one per stage, the second stage
        # a process of its own; then 2 stages of 2 tensor ranks. Greedy tokens are those of one
        # process, and every follower leaves when rank 0's engine shuts down.
        prompts = ["Once upon a time", "The sky"]
        params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
        one = [o.outputs[0].token_ids for o in LLM(model=MODEL).generate(prompts, params)]
        for tp, pp in ((1, 2), (2, 2)):
            llm = LLM(model=MODEL, tensor_parallel_size=tp, pipeline_parallel_size=pp)
            got = [o.outputs[0].token_ids for o in llm.generate(prompts, params)]
            self.assertEqual(got, one, f"tp {tp} pp {pp}")
            followers = llm._followers
            self.assertEqual(len(followers), tp * pp - 1)
            del llm
            for f in followers:
                self.assertEqual(f.wait(timeout=30), 0)


if __name__ == "__main__":
    unittest.main()
