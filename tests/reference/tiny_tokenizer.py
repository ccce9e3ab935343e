"""A 512-entry byte-level BPE tokenizer for the synthetic checkpoints, trained with the Hugging
Face `tokenizers` library on the short text below: ids 0 and 1 are <s> and </s>, then the 256
byte symbols, then merges up to 512 entries. Training is deterministic, so every checkpoint gets
the same vocabulary.
"""
import json
import os

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

VOCAB_SIZE = 512
BOS, EOS = "<s>", "</s>"

TEXT = """\
The lighthouse keeper climbed the spiral stairs every evening and lit the lamp before the sun
went down. From the top he could see the harbour, the fishing boats coming home, and the long
grey line of the breakwater. On clear nights the beam reached the islands far to the west.
The keeper kept a notebook of the weather: wind from the north, rain in the morning, fog at
noon, a calm sea after dark. He wrote the time the ferry passed and the names of the ships that
anchored in the bay. In winter the storms came one after another, and the waves broke over the
rocks so high that the spray reached the windows of the kitchen.
A small cat lived with him. She slept on the warm stones by the stove and watched the gulls from
the window. When the supply boat arrived each Thursday, she ran down to the pier to inspect the
crates of bread, apples, candles, lamp oil, flour, coffee and letters from the town.
Children from the village sometimes walked out along the shore to visit. The keeper showed them
the great glass lens, the brass gears of the clockwork that turned it, and the logbook with a
hundred years of entries written in many different hands. They asked how far the light could be
seen, how often the glass was cleaned, and whether he was ever lonely in the long dark months.
He told them that the sea is never quiet, that every night has its own sound, and that a light is
worth keeping because somebody out there is always looking for the way home.
Numbers matter too: 0 1 2 3 4 5 6 7 8 9, 10, 42, 128, 2048, 3.14159, 1/2, 100%, $5.00, #7, (a+b)*c.
Punctuation and symbols: commas, periods. Questions? Exclamations! Quotes "like this" and 'this';
colons: semicolons; dashes - and underscores_, brackets [x] {y} <z>, at @ and & and ~ and | too.
"""


def build():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=[BOS, EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator([line for line in TEXT.splitlines() if line], trainer)
    if tok.get_vocab_size() != VOCAB_SIZE:
        raise RuntimeError(f"the embedded text gave {tok.get_vocab_size()} tokens, expected {VOCAB_SIZE}")
    return tok


def write(out_dir):
    """tokenizer.json, tokenizer_config.json and the BOS/EOS ids as a dict for config.json."""
    tok = build()
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS, "eos_token": EOS,
                   "add_bos_token": True, "add_eos_token": False, "model_max_length": 8192,
                   "clean_up_tokenization_spaces": False}, f, indent=2)
    return {"bos_token_id": tok.token_to_id(BOS), "eos_token_id": tok.token_to_id(EOS)}
