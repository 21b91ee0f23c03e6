"""The embedded SYNTHETIC worlds (ARCHITECTURE.md, "The embedded default: synthetic worlds").

Each world is generated from a seed in seconds and writes the same files and feature stores a user's real data
would, so it feeds the real path rather than replacing it; every output it reaches says SYNTHETIC.

    procedural       procedural.py     tasks of ordered steps, identity + latent state (CAST, the stack); the history world
    moving objects   moving_objects.py per-frame patch tokens of moving objects (VEDJE, stage-1 retrieval, VideoComp, GenState)
    polysemous       polysemous.py     multi-intent videos (GRDR)
    rendered         rendered.py       mp4 clips of state transitions (GenState through the extraction engine)
    release corpus   release.py        rendered procedure videos + annotation files in each dataset's release format
                                       (the real path, end to end, offline: configs/prepare.py -> every method)

`vidjax.data` (what real data passes through) imports nothing from here.
"""
