"""A faster FlatBuffers Builder: the same bytes as the runtime's, with fewer Python calls.

flatbuffers.Builder (the Python runtime) spends most of its time in a few small methods: it
pads one byte per call, checks every number's range before struct does, and reaches its own
fields through methods. This subclass overrides exactly those, keeping their results; the
generated code (sundial.protocol) and the rest of the runtime drive it unchanged. The codec
builds every request with it; tests/test_codec.py checks that it writes byte for byte what
flatbuffers.Builder writes, for every kind of request.

Range checks: struct still refuses a number that does not fit its field (struct.error), and
the codec checks every argument's type and range before building (SundialError).
"""

import flatbuffers
from flatbuffers import number_types as N

_UOFFSET = N.UOffsetTFlags.packer_type
_SOFFSET = N.SOffsetTFlags.packer_type
_VOFFSET = N.VOffsetTFlags.packer_type


class Builder(flatbuffers.Builder):
    __slots__ = ()

    def Head(self):
        return self.head

    def Offset(self):
        return len(self.Bytes) - self.head

    def Pad(self, n):
        if n:
            head = self.head - n
            self.Bytes[head:self.head] = bytes(n)
            self.head = head

    def Prep(self, size, additionalBytes):
        if size > self.minalign:
            self.minalign = size
        align = -(len(self.Bytes) - self.head + additionalBytes) & (size - 1)
        while self.head < align + size + additionalBytes:
            old = len(self.Bytes)
            self.growByteBuffer()
            self.head += len(self.Bytes) - old
        if align:
            self.Pad(align)

    def Place(self, x, flags):
        self.head -= flags.bytewidth
        flags.packer_type.pack_into(self.Bytes, self.head, x)

    def PlaceUOffsetT(self, x):
        self.head -= 4
        _UOFFSET.pack_into(self.Bytes, self.head, x)

    def PlaceSOffsetT(self, x):
        self.head -= 4
        _SOFFSET.pack_into(self.Bytes, self.head, x)

    def PlaceVOffsetT(self, x):
        self.head -= 2
        _VOFFSET.pack_into(self.Bytes, self.head, x)

    def Prepend(self, flags, off):
        self.Prep(flags.bytewidth, 0)
        self.head -= flags.bytewidth
        flags.packer_type.pack_into(self.Bytes, self.head, off)

    def PrependSlot(self, flags, o, x, d):
        if x != d or (self.forceDefaults and d is not None):
            self.Prepend(flags, x)
            self.current_vtable[o] = len(self.Bytes) - self.head

    def PrependUOffsetTRelative(self, off):
        self.Prep(4, 0)
        offset = len(self.Bytes) - self.head
        if off > offset:
            raise flatbuffers.builder.OffsetArithmeticError(
                "flatbuffers: Offset arithmetic error.")
        self.head -= 4
        _UOFFSET.pack_into(self.Bytes, self.head, offset - off + 4)

    def PrependUOffsetTRelativeSlot(self, o, x, d):
        if x != d or self.forceDefaults:
            self.PrependUOffsetTRelative(x)
            self.current_vtable[o] = len(self.Bytes) - self.head
