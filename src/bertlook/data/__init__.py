"""Stage 1, data: corpora (Wikipedia segments), treebanks (UD, local, silver), GloVe, downloads."""
