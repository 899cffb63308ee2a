"""Token labeling (issue 46, the library part): the label-map files, the token targets and the released losses
against the release's outputs (the fixtures' relabel/, made from Refiner_ViT @ b3e8cb0), the corrected crop
alignment against maps that encode their own coordinates, and the inputs the release crashes on refused."""

import pytest
import torch

from tests.helpers.checks import FIXTURES
from tests.helpers.data_corpus import special_file
from vspec.nn.token_losses import (
    cos_reg_term,
    relabel_cross_entropy,
    relabel_pooled_cross_entropy,
    soft_cross_entropy,
    soft_target_ce_cos_reg,
)
from vspec.train.data.registry import DataError
from vspec.train.token_labels.maps import (
    MAX_RECORD,
    crop_boxes,
    dense_scores,
    image_keys,
    label_path,
    pool,
    read_label_map,
    read_record,
    relabel_target,
)

ATOL = 1e-6


def fixture(name):
    return torch.load(FIXTURES / "relabel" / f"{name}.pt", weights_only=True)


def close(got, want, atol=ATOL):
    assert got.shape == want.shape, (got.shape, want.shape)
    diff = (got - want).abs().max().item()
    assert diff <= atol, f"{diff:.3g} from the release's output"


# ---- the files

def test_image_keys_name_files_by_their_path_and_arrays_by_class_and_index(tmp_path):
    import numpy as np
    from PIL import Image
    from torchvision.datasets import ImageFolder

    from vspec.train.data.sources import ArrayImages

    for rel in ("cls_b/b.001.png", "cls_a/z.png", "cls_a/a.png"):
        (tmp_path / rel).parent.mkdir(exist_ok=True)
        Image.new("RGB", (4, 4)).save(tmp_path / rel)
    keys = image_keys(ImageFolder(str(tmp_path)))
    assert keys == ["cls_a/a.png", "cls_a/z.png", "cls_b/b.001.png"]
    assert label_path("R", keys[2]).as_posix() == "R/cls_b/b.pt"
    assert image_keys(ArrayImages(np.zeros((2, 8, 8), np.uint8), [3, 0])) == ["3/0000000", "0/0000001"]
    with pytest.raises(DataError, match="cannot name"):
        image_keys(object())


def test_label_path_cuts_at_the_first_dot(tmp_path):
    # a rule cutting at the last dot (Path.stem) gives cls_b/b.001.pt for cls_b/b.001.png
    data = fixture("label_format")
    got = [label_path(tmp_path, p).relative_to(tmp_path).as_posix() for p in data["image_paths"]]
    assert got == data["label_paths"]
    assert label_path("r", "cls.x/a.png").as_posix() == "r/cls.pt"  # the release cuts in the folder name too
    with pytest.raises(DataError):
        label_path("r", "/abs/a.png")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_read_label_map_reads_the_on_disk_maps(tmp_path, dtype):
    # a reader keeping the stored dtype returns float64 / float16; one reading another layout changes the shape
    maps = fixture("label_format")["on_disk"]
    for i, m in enumerate(maps):
        torch.save(m.to(dtype), tmp_path / f"{i}.pt")
        got = read_label_map(tmp_path / f"{i}.pt")
        assert got.dtype == torch.float32
        assert torch.equal(got, m.to(dtype).float())


def test_read_label_map_refuses_bad_files_in_one_line(tmp_path):
    # a reader without checks returns these and the target builder fails later, far from the file
    cases = {"shape.pt": torch.zeros(3, 5, 14, 14), "narrow.pt": torch.zeros(2, 5, 14, 4),
             "dict.pt": {"map": torch.zeros(2, 5, 14, 14)}}
    for name, value in cases.items():
        torch.save(value, tmp_path / name)
    (tmp_path / "corrupt.pt").write_bytes(b"not a torch file\n\x00\x01")
    for name in [*cases, "corrupt.pt", "missing.pt"]:
        with pytest.raises(DataError) as info:
            read_label_map(tmp_path / name)
        assert name in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("kind,why", [("FIFO", "is a named pipe (FIFO), not a label map file"),
                                      ("/dev/zero", "is a character device, not a label map file"),
                                      ("/proc/self/mem", "not a readable label map (OSError: [Errno 5]")])
def test_a_label_map_that_is_no_regular_file_is_one_line_not_a_hang(tmp_path, kind, why):
    """A FIFO blocked torch.load for ever (the run also ignored SIGTERM); /dev/zero never ends."""
    path = special_file(tmp_path / "c" / "a.pt", kind)
    with pytest.raises(DataError) as info:
        read_label_map(path)
    assert str(info.value).startswith(f"{path}: {why}")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), 1e300])
def test_a_label_map_of_non_finite_scores_is_refused_naming_it(tmp_path, value):
    """`vspec label --mean 1e308` wrote all-NaN maps that a rerun skipped and training read; 1e300 in float64 is
    inf in float32."""
    m = fixture("label_format")["on_disk"][0].double()
    m[0, 1, 2, 3] = value
    torch.save(m, tmp_path / "a.pt")
    with pytest.raises(DataError, match=f"^{tmp_path}/a.pt: the label map's scores hold NaN or infinite values"):
        read_label_map(tmp_path / "a.pt")


def test_labels_json_is_read_when_it_is_a_small_json_object(tmp_path):
    """labels.json (vspec label's record) is optional: None without one; else a JSON object, read with a bound."""
    assert read_record(tmp_path) is None
    (tmp_path / "labels.json").write_text('{"data": "digits", "classes": 10}')
    assert read_record(tmp_path) == {"data": "digits", "classes": 10}
    path = tmp_path / "labels.json"
    cases = {b"[1, 2]": "not a JSON object (an array), as vspec label writes", b"7": "not a JSON object (a number)",
             b"null": "not a JSON object (null)", b"{": "not JSON (Expecting property name",
             b"\xff\xfe{\x00": "not JSON (", b"[" * 100_000 + b"]" * 100_000: "not the JSON of vspec label: nested",
             b'{"a": "' + b"x" * MAX_RECORD + b'"}': f"more than the {MAX_RECORD:,} bytes"}
    for text, why in cases.items():
        path.write_bytes(text)
        with pytest.raises(DataError) as info:
            read_record(tmp_path)
        assert str(info.value).startswith(f"{path}: {why}"), (text[:10], str(info.value))
    for kind, why in (("FIFO", "is a named pipe (FIFO), not a labels.json file"),
                      ("/dev/zero", "is a character device"), ("/proc/self/mem", "cannot be read (Input/output")):
        path.unlink()
        special_file(path, kind)
        with pytest.raises(DataError) as info:
            read_record(tmp_path)
        assert str(info.value).startswith(f"{path}: {why}"), str(info.value)


# ---- the targets, the release's transposed box (released_alignment=True)

@pytest.mark.parametrize("x", ["a", "b"])
@pytest.mark.parametrize("size", [14, 7, 1])
def test_released_pooling_steps(x, size):
    # the steps isolated: a box scaled by Hm, or not transposed, fails the boxes on batch a's non-square crops and
    # b's strips; a wrong sampling (aligned=True, a fixed sampling_ratio) fails the raw pool
    data = fixture("align")
    batch = data[f"{x}_batch"]
    dense = dense_scores(batch, 10)
    close(dense, data[f"{x}_dense_scores"])
    boxes = crop_boxes(batch[:, 2, 0, 0, :4], 14, 14, released=True)
    close(boxes, data[f"{x}_roi_boxes_ls{size}"])
    close(pool(dense, boxes, size), data[f"{x}_roi_out_ls{size}"])
    if size > 1:
        close(pool(dense, boxes, 1), data[f"{x}_roi_out_ls{size}_cls"])


@pytest.mark.parametrize("x", ["a", "b"])
@pytest.mark.parametrize("size", [14, 7, 1])
@pytest.mark.parametrize("smoothing", [0.1, 0.0])
def test_released_targets(x, size, smoothing):
    # a softmax after the smoothing, column order (tokens column-major, class token last) or the smoothing of
    # the pooled rows (renormalised to 1 instead of 1 + s / C) each move these by far more than 1e-6
    data = fixture("align")
    batch = data[f"{x}_batch"]
    before = batch.clone()
    got = relabel_target(batch, 10, smoothing=smoothing, label_size=size, released_alignment=True)
    close(got, data[f"{x}_target_ls{size}_s{smoothing}"])
    # the release rewrites the crop plane in place (X_coords_after_call): calling twice differs there, not here
    assert torch.equal(batch, before)
    assert not torch.equal(data[f"{x}_coords_after_call"], batch[:, 2, 0, 0, :4])
    assert torch.equal(got, relabel_target(batch, 10, smoothing=smoothing, label_size=size,
                                           released_alignment=True))


def test_released_targets_of_the_dataset_items_and_mixing():
    # the dataset's returned maps (flips and crops drawn by the release) and step 8's mixing with the batch's flip
    # (a partner b + 1 instead of B - 1 - b, or lam on the wrong side, fails the second)
    data = fixture("label_format")
    for size in (14, 1):
        close(relabel_target(data["returned"], 10, label_size=size, released_alignment=True),
              data[f"target_label_size{size}"])
    inputs = fixture("losses")["inputs"]
    for name, lam in (("target_relabel", 1.0), ("target_relabel_mixup0.7", 0.7)):
        close(relabel_target(inputs["relabel_source_maps"], 10, lam=lam, label_size=7, released_alignment=True),
              inputs[name])


# ---- the targets, the crop's own region (the default)

def coordinate_map(axis: int, hm: int, wm: int) -> torch.Tensor:
    """One (1, 3, 2, Hm, Wm) batch whose top score 3 sits at the class equal to its row (axis 0) or column
    (axis 1), its second (score 0) at the next class; the image class 0 at [2, 0, 0, 5]."""
    rows, cols = torch.meshgrid(torch.arange(hm), torch.arange(wm), indexing="ij")
    own = (rows if axis == 0 else cols).float()
    batch = torch.zeros(1, 3, 2, hm, wm)
    batch[0, 0, 0], batch[0, 1, 0], batch[0, 1, 1] = 3.0, own, own + 1
    return batch


def expected_tokens(classes: torch.Tensor, num_classes: int) -> torch.Tensor:
    """(C, S²): each token's pooled scores are 3 at its class and 0 elsewhere, softmaxed (smoothing 0)."""
    return (3.0 * torch.nn.functional.one_hot(classes.flatten(), num_classes).T.float()).softmax(dim=0)


@pytest.mark.parametrize("axis", [0, 1])
def test_default_alignment_pools_the_cropped_rows_and_columns(axis):
    # An 8 x 16 map, S = 4, a non-square crop whose bins cover whole cells: class = row, crop rows 1..4 (one cell a
    # bin) and columns 4..11 (two cells a bin): token (i, j) must see exactly row 1 + i; class = column, crop rows
    # 0..7 and columns 4..7: token (i, j) sees column 4 + j. Cropping along the wrong axis, scaling rows by Wm or
    # ordering tokens column-major fails. The released box fails both: it samples rows over the crop's
    # horizontal range and columns over its vertical one, all scaled by Wm (rows 3.5..11.5 for the first).
    # The fractions are exact in binary: roi_align's adaptive grid is ceil(bin size), and 0.3 * 10 in float32
    # is above 3, which would add a sample to each bin.
    size, num_classes, hm, wm = 4, 17, 8, 16
    top, left, h, w = (1, 4, 4, 8) if axis == 0 else (0, 4, 8, 4)
    batch = coordinate_map(axis, hm, wm)
    batch[0, 2, 0, 0, :4] = torch.tensor([top / hm, left / wm, h / hm, w / wm])
    start = top if axis == 0 else left
    ij = torch.arange(size)
    classes = (start + ij)[:, None].expand(size, size) if axis == 0 else (start + ij)[None, :].expand(size, size)
    got = relabel_target(batch, num_classes, smoothing=0.0, label_size=size)
    close(got[0, :, 2:], expected_tokens(classes, num_classes), atol=1e-5)
    # the class token averages the crop: every row (column) of it with weight 1 / 4, score 3 / 4
    cls = torch.zeros(num_classes)
    cls[start:start + size] = 0.75
    close(got[0, :, 1], cls.softmax(dim=0), atol=1e-5)
    released = relabel_target(batch, num_classes, smoothing=0.0, label_size=size, released_alignment=True)
    assert (released[0, :, 2:] - got[0, :, 2:]).abs().max() > 0.1


def test_the_target_builder_refuses_maps_it_would_misread():
    # unchecked, a repeated class index collides in the scatter, an index out of range raises deep in scatter_,
    # and a two-plane map (no crop plane) reads its crop from the class plane
    batch = fixture("label_format")["returned"]
    dup = batch.clone()
    dup[0, 1, 1, 3, 3] = dup[0, 1, 0, 3, 3]
    wide = batch.clone()
    wide[1, 1, 0, 0, 0] = 10
    bad_class = batch.clone()
    bad_class[2, 2, 0, 0, 5] = 12
    for bad in (dup, wide, bad_class, batch[:, :2]):
        with pytest.raises(ValueError):
            relabel_target(bad, 10, label_size=14)


# ---- the losses

def loss_case(name: str, inputs: dict, case: dict):
    """The case `name` of losses.pt computed from the inputs alone: (loss, leaves)."""
    out = (case["output"] if "repeat" in name else inputs["output"]).clone().requires_grad_()
    aux = inputs["aux_output"].clone().requires_grad_()
    atten = [a.clone().requires_grad_() for a in inputs["atten"]]
    if name.startswith("stce"):
        if "repeat" in name:
            return soft_cross_entropy(out, inputs["target_2d_mixup0.7"]), (out, aux, atten)
        return soft_target_ce_cos_reg(out, inputs["target_2d_mixup0.7"], atten, n_comn=2), (out, aux, atten)
    kind, weight, *rest = name.split("_")
    box = None if "nobox" in rest else inputs["box"]
    target = inputs[("target_2d" if "2d" in rest else "target_relabel") + ("_mixup0.7" if "mixup" in rest else "")]
    kwargs = {"dense_weight": float(weight.removeprefix("dw"))}
    if "atten" in rest:
        kwargs.update(atten=atten, n_comn=3 if "ncomn3" in rest else 2)
    loss = (relabel_pooled_cross_entropy if kind == "rpce" else relabel_cross_entropy)(out, aux, box, target, **kwargs)
    return loss, (out, aux, atten)


@pytest.mark.parametrize("name", sorted(fixture("losses")["cases"]))
def test_released_losses_and_gradients(name):
    # every weight, the box's lam (1 - 16/49) on the class target only, the token transposition, tokens taking
    # their own image's row of a 2-D target, the cosine over the heads axis and the repeat tiling: a change to any
    # moves a loss or a gradient here (the token targets mixed by the box too fail the *_box cases)
    data = fixture("losses")
    case = data["cases"][name]
    loss, (out, aux, atten) = loss_case(name, data["inputs"], case)
    loss.backward()
    close(loss, case["loss"])
    close(out.grad, case["grad_output"])
    if "grad_aux_output" in case:
        close(aux.grad, case["grad_aux_output"])
    for a, want in zip(atten, case["grad_atten"], strict=True) if "grad_atten" in case else ():
        zero = torch.zeros_like(a)
        close(zero if a.grad is None else a.grad, zero if want is None else want)


def test_released_loss_of_the_model_outputs():
    # the Refiner model's own training outputs (MixToken box, label_size 6 targets, 4 attention maps): the loss
    # and the cos term the release computed from them (a cos term over the token axis, or not divided by
    # n_comn, misses these)
    mix = fixture("mix_token")
    close(relabel_target(mix["target_source"], 10, label_size=6, released_alignment=True), mix["target"])
    close(relabel_cross_entropy(mix["train_cls"], mix["train_aux"], mix["bbox"], mix["target"]), mix["loss"])
    cos = fixture("cos_reg")
    plain = relabel_cross_entropy(cos["train_cls"], cos["train_aux"], cos["bbox"], cos["target"])
    close(plain, cos["loss_no_atten"])
    for n in (2, 3):
        close(cos_reg_term(cos["atten"], n), cos[f"cos_term_ncomn{n}"])
        close(relabel_cross_entropy(cos["train_cls"], cos["train_aux"], cos["bbox"], cos["target"],
                                    atten=cos["atten"], n_comn=n), cos[f"loss_ncomn{n}"])


def test_the_losses_refuse_what_the_release_crashes_on():
    # the release fails these with a shape mismatch or an AttributeError deep inside (losses.pt's `errors`),
    # or (token count) silently pairs tokens with the wrong targets
    inputs = fixture("losses")["inputs"]
    out, aux, box = inputs["output"], inputs["aux_output"], inputs["box"]
    with pytest.raises(ValueError, match="relabel_cross_entropy"):
        relabel_pooled_cross_entropy(out, aux, box, inputs["target_relabel"])
    with pytest.raises(ValueError, match="attention maps"):
        soft_target_ce_cos_reg(out, inputs["target_2d"], None)
    with pytest.raises(ValueError, match="attention maps"):
        relabel_cross_entropy(out, aux, box, inputs["target_relabel"], atten=inputs["atten"])  # n_comn 12
    with pytest.raises(ValueError, match="label_size"):
        relabel_cross_entropy(out, aux[:, :36], box, inputs["target_relabel"])
    with pytest.raises(ValueError, match="multiple"):
        soft_cross_entropy(out[:3], inputs["target_2d"][:2])
