"""An example of extending hfncl without editing it: a data format (``npz_pairs``) and a similarity head
(``bilinear``), registered in the ``hfncl.data_formats`` and ``hfncl.similarity_heads`` entry-point groups."""
