"""TensorBoard event files written without TensorFlow.

The Ray driver writes every role's curves, but otherwise needs no TensorFlow:
importing it costs ~2.5 CPU-seconds per run. This writer makes the same
records as ``tf.summary.scalar``, ``tf.summary.text`` and
``tf.summary.image`` (tensor values tagged with the plugin TensorBoard reads
them by) from TensorBoard's own protobufs, framed as TFRecords: per record,
the length (uint64, little-endian), its masked CRC-32C, the bytes, their
masked CRC-32C. TensorFlow's ``summary_iterator`` reads them back (tests).
"""

from __future__ import annotations

import io
import itertools
import os
import socket
import struct
import time
from typing import Optional

import numpy as np
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.proto import summary_pb2
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
from tensorboard.plugins.image import metadata as image_metadata
from tensorboard.plugins.scalar import metadata as scalar_metadata
from tensorboard.plugins.text import metadata as text_metadata
from tensorboard.util import tensor_util

# Two writers of one process opened in the same second still get two files, in order
# (TensorBoard reads a directory's event files sorted by name).
_FILE_NUMBERS = itertools.count()


class EventFileWriter:
    """Appends summaries to one new ``events.out.tfevents.*`` file in ``logdir``."""

    def __init__(self, logdir: str):
        os.makedirs(logdir, exist_ok=True)
        name = (f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}."
                f"{os.getpid()}.{next(_FILE_NUMBERS):06d}.v2")
        self.path = os.path.join(logdir, name)
        self._file: Optional[io.BufferedWriter] = open(self.path, "wb")
        self._write_event(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))
        self.flush()

    def scalar(self, tag: str, value: float, step: int) -> None:
        """A float32 scalar, as ``tf.summary.scalar`` writes it (TensorBoard's Scalars tab)."""
        self._write_value(tag, step, tensor_util.make_tensor_proto(np.float32(value)),
                          scalar_metadata.create_summary_metadata(display_name=tag, description=""))

    def text(self, tag: str, markdown: str, step: int) -> None:
        """One string, as ``tf.summary.text`` writes it (the Text tab renders Markdown)."""
        self._write_value(tag, step, tensor_util.make_tensor_proto(np.array(markdown.encode(), object)),
                          text_metadata.create_summary_metadata(display_name=tag, description=""))

    def image(self, tag: str, image: np.ndarray, step: int) -> None:
        """One uint8 image ``[H, W, C]`` (C = 1, 3 or 4), PNG-encoded as ``tf.summary.image`` does."""
        from PIL import Image  # pylint: disable=g-import-not-at-top

        pixels = np.asarray(image, np.uint8)
        if pixels.ndim != 3 or pixels.shape[-1] not in (1, 3, 4):
            raise ValueError(f"image must be [H, W, 1|3|4] uint8 (got shape {pixels.shape})")
        png = io.BytesIO()
        Image.fromarray(pixels[..., 0] if pixels.shape[-1] == 1 else pixels).save(png, format="PNG")
        height, width = pixels.shape[:2]
        blobs = np.array([str(width).encode(), str(height).encode(), png.getvalue()], object)
        self._write_value(tag, step, tensor_util.make_tensor_proto(blobs),
                          image_metadata.create_summary_metadata(display_name=tag, description=""))

    def encoded_image(self, tag: str, encoded: bytes, width: int, height: int, step: int) -> None:
        """An already encoded image (PNG, or a GIF, which the Images tab plays) as a legacy image value."""
        value = summary_pb2.Summary.Value(tag=tag, image=summary_pb2.Summary.Image(
            height=height, width=width, colorspace=3, encoded_image_string=encoded))
        self._write_event(event_pb2.Event(wall_time=time.time(), step=int(step),
                                          summary=summary_pb2.Summary(value=[value])))

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        """Flushes and closes the file; further writes fail."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def _write_value(self, tag, step, tensor, metadata) -> None:
        value = summary_pb2.Summary.Value(tag=tag, tensor=tensor, metadata=metadata)
        self._write_event(event_pb2.Event(wall_time=time.time(), step=int(step),
                                          summary=summary_pb2.Summary(value=[value])))

    def _write_event(self, event: event_pb2.Event) -> None:
        if self._file is None:
            raise ValueError(f"event file {self.path} is closed")
        data = event.SerializeToString()
        header = struct.pack("<Q", len(data))
        self._file.write(header + struct.pack("<I", masked_crc32c(header)) + data
                         + struct.pack("<I", masked_crc32c(data)))
