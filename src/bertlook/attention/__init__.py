"""Stage 2, attention: model loading, extraction, the attention store, word-level maps, random init."""
