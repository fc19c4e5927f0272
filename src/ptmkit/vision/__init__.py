"""Vision–language pre-training: image encoders, image–text data and the objectives that join
images and text (CLIP, VisualBERT, ViLBERT, and CLIP's caption-LM and bag-of-words baselines).

* ``vision.encoders``: image encoders registered as ``image_encoder`` (``cnn``, ``vit``); each
  maps pixels ``[B, 3, S, S]`` to an :class:`~ptmkit.vision.encoders.base.ImageOutput`.
* ``vision.objectives``: objectives registered as ``vl_objective``; each trains an image encoder
  and (most of them) a text Transformer, and scores every image against every text for retrieval
  and zero-shot classification (:meth:`~ptmkit.vision.objectives.base.VLObjective.score`).
* ``vision.images``: reading image files (PNG, JPEG) into square uint8 arrays, with errors that
  name the file; ``vision.augment``: random crop and colour jitter by config.

A preset with a ``vision:`` section is trained through ``ptm pretrain`` by
:mod:`ptmkit.workflows.vision_language`.
"""
