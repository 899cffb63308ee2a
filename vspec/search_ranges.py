"""The lazy sequences of a searched axis's values (the `--vary` of `vspec fit` and `vspec compare --match`,
vspec/fitting.py): a range of floats and a range with one value more, each never listed, and `size`, an axis's
length (a `range`'s even past sys.maxsize)."""

from collections.abc import Iterator, Sequence

__all__ = ["FloatRange", "WithValue", "size"]


class FloatRange(Sequence):
    """`lo, lo + step, ...` (`size` values, each rounded to 10 decimals), never listed: LOW:HIGH:STEP of floats."""

    def __init__(self, lo: float, step: float, size: int):
        self.lo, self.step, self.size = lo, step, size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self.size))]
        if not -self.size <= i < self.size:
            raise IndexError(i)
        return round(self.lo + (i % self.size) * self.step, 10)

    def __repr__(self) -> str:
        return f"FloatRange({self.lo!r}, {self.step!r}, {self.size})"


class WithValue(Sequence):
    """A range with one value more (a width off the step), in order; never listed."""

    def __init__(self, values: range, value: int):
        self.values, self.value, self.size = values, value, size(values) + 1
        self.at = size(range(values.start, value, values.step)) if value > values.start else 0

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = i + len(self) if i < 0 else i
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self.values[i] if i < self.at else self.value if i == self.at else self.values[i - 1]

    def __iter__(self) -> Iterator[int]:
        yield from self.values[:self.at]
        yield self.value
        yield from self.values[self.at:]

    def __contains__(self, v) -> bool:
        return v == self.value or v in self.values


def size(values: Sequence) -> int:
    """How many values an axis has (a range's length even past sys.maxsize).

    Args:
        values: the axis's values (a list, `range`, `FloatRange` or `WithValue`).
    """
    if isinstance(values, range):
        return max(0, (values.stop - values.start + values.step - 1) // values.step)  # a positive step
    return values.size if isinstance(values, (FloatRange, WithValue)) else len(values)
