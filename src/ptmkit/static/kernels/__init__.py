"""The static models' numba kernels: the per-chunk Hogwild updates of word2vec (``w2v``: one
pair at a time, word2vec.c's update; ``w2v_shared``: shared negatives and shared Huffman paths
per window), fastText (``ft``) and fastText's supervised classifier (``classify``), and the
software prefetch of matrix rows they and GloVe's loop share (``prefetch``)."""
