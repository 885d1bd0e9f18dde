"""Procedural house layouts for the MiniWorld house task (pure numpy, no OpenGL).

A *layout* is what stays fixed within a trial: the floorplan (rectangular rooms on a
grid, doorways between them, wall / floor / ceiling textures, pictures on the walls) and
the object instances (category, position, yaw). It is a pure function of the house seed,
so the renderer (``house_render``), the navigation grid (``house_nav``) and the top-down
map all agree on it.

Coordinates follow MiniWorld: x east, z south, y up (the top-down map draws x to the
right and z downwards). Yaw is counter-clockwise seen from above; heading = (cos, -sin)
in (x, z).
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SPLITS = ("train", "test")
WALL_THICKNESS = 0.2  # metres between the inner faces of two adjacent rooms
WALL_HEIGHT = 2.6
DOOR_HEIGHT = 2.2
FORWARD_STEP_M = 0.25  # metres per forward action (HouseEnv, HouseVecEnv)
TURN_STEP_DEG = 30.0  # degrees per turn action
ODOM_LIMIT_M = 100.0  # bound of odometry x, y: houses are < 35 m across
_SALT = 0x4F05E  # decorrelates layout streams from other uses of the same integer seed


@dataclass(frozen=True)
class Category:
    """A goal category: one (shape, colour) kind of object."""

    name: str
    shape: str
    """"ball", "box", "key" or a MiniWorld mesh name ("duckie", "office_desk", ...)."""
    color: str | None
    """MiniWorld colour name for balls, boxes and keys; None for textured meshes."""
    height: float
    """Height in metres (meshes are scaled to it)."""
    radius: float
    """Footprint radius in metres: collisions, navigation grid, distance to the object."""
    rgb: tuple[int, int, int]
    """Colour on the top-down map."""
    near_wall: bool = False
    """Furniture: placed against a wall rather than anywhere in the room."""


_RGB = {
    "red": (220, 40, 40), "green": (40, 190, 40), "blue": (40, 80, 230),
    "yellow": (235, 215, 30), "purple": (130, 50, 190), "grey": (110, 110, 110),
}

# Fixed order: the goal index in observations is a position in this tuple. Append only.
CATEGORIES: tuple[Category, ...] = (
    *(Category(f"{c}_ball", "ball", c, 0.5, 0.25, _RGB[c]) for c in ("red", "green", "blue", "yellow", "purple")),
    *(Category(f"{c}_box", "box", c, 0.5, 0.36, _RGB[c]) for c in ("red", "green", "blue", "yellow")),
    *(Category(f"{c}_key", "key", c, 0.35, 0.43, _RGB[c]) for c in ("red", "blue", "yellow")),
    Category("duckie", "duckie", None, 0.45, 0.3, (250, 190, 60)),
    Category("medkit", "medkit", None, 0.35, 0.22, (245, 245, 245)),
    Category("potion", "potion", None, 0.5, 0.18, (60, 200, 200)),
    Category("office_chair", "office_chair", None, 1.0, 0.42, (40, 40, 40), near_wall=True),
    Category("office_desk", "office_desk", None, 0.8, 0.47, (140, 90, 50), near_wall=True),
    Category("barrel", "barrel", None, 0.9, 0.33, (80, 120, 60), near_wall=True),
    Category("cone", "cone", None, 0.6, 0.2, (255, 120, 0)),
)
GOAL_NAMES: tuple[str, ...] = tuple(c.name for c in CATEGORIES)

# Texture file stems in miniworld/textures (registered by house_render under these names).
WALL_TEXTURES = ("brick_wall_1", "cinder_blocks_1", "concrete_1", "concrete_3", "drywall_1",
                 "stucco_1", "wood_planks_1", "marble_2", "cardboard_4", "white_1")
FLOOR_TEXTURES = ("wood_1", "wood_2", "wood_planks_1", "floor_tiles_bw_1", "floor_tiles_white",
                  "concrete_tiles_1", "marble_1", "ceiling_tiles_1", "cardboard_3")
CEIL_TEXTURES = ("ceiling_tiles_1", "ceiling_tile_noborder_1", "white_1", "drywall_1")


def miniworld_dir() -> Path:
    """The installed miniworld package folder, found without importing it (importing it
    loads pyglet before the headless option can be set)."""
    spec = importlib.util.find_spec("miniworld")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the MiniWorld house needs the `miniworld` package: pip install miniworld")
    return Path(list(spec.submodule_search_locations)[0])


def portrait_names() -> tuple[str, ...]:
    """Texture names of the paintings shipped with MiniWorld, sorted (seed-stable)."""
    return tuple(sorted(f"portraits/{p.stem}" for p in (miniworld_dir() / "textures" / "portraits").glob("*.png")))


# -- seeds and splits ------------------------------------------------------------------
def house_split(house_seed: int) -> str:
    """"test" for one house seed in five (a fixed hash), "train" for the others."""
    h = int.from_bytes(hashlib.blake2b(str(int(house_seed)).encode(), digest_size=8).digest(), "little")
    return "test" if h % 5 == 0 else "train"


def check_split(split: str) -> str:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return split


def house_seeds(split: str, n: int, start: int = 0) -> list[int]:
    """The first ``n`` house seeds >= ``start`` of a split (a fixed evaluation set)."""
    check_split(split)
    out, s = [], int(start)
    while len(out) < n:
        if house_split(s) == split:
            out.append(s)
        s += 1
    return out


def draw_house_seed(rng: np.random.Generator, split: str) -> int:
    check_split(split)
    while True:
        s = int(rng.integers(0, 2**31 - 1))
        if house_split(s) == split:
            return s


# -- layout ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Room:
    min_x: float
    max_x: float
    min_z: float
    max_z: float
    wall_tex: str
    floor_tex: str
    ceil_tex: str

    @property
    def area(self) -> float:
        return (self.max_x - self.min_x) * (self.max_z - self.min_z)


@dataclass(frozen=True)
class Door:
    """An opening through the wall between rooms ``a`` (west / north) and ``b``.

    ``axis == "x"``: the wall is a line of constant x; the passage spans x in
    [a.max_x, b.min_x] and z in [lo, hi]. ``axis == "z"``: constant z, the passage spans
    z in [a.max_z, b.min_z] and x in [lo, hi].
    """

    axis: str
    a: int
    b: int
    lo: float
    hi: float
    height: float

    def rect(self, rooms: tuple[Room, ...]) -> tuple[float, float, float, float]:
        """Passage rectangle (min_x, max_x, min_z, max_z)."""
        ra, rb = rooms[self.a], rooms[self.b]
        if self.axis == "x":
            return ra.max_x, rb.min_x, self.lo, self.hi
        return self.lo, self.hi, ra.max_z, rb.min_z


@dataclass(frozen=True)
class ObjectInstance:
    category: int  # index into CATEGORIES
    x: float
    z: float
    yaw: float

    @property
    def cat(self) -> Category:
        return CATEGORIES[self.category]


@dataclass(frozen=True)
class Picture:
    """A framed painting; (x, z) on the wall face, yaw pointing into the room."""

    x: float
    z: float
    yaw: float
    tex: str
    width: float


@dataclass(frozen=True)
class HouseLayout:
    seed: int
    rooms: tuple[Room, ...]
    doors: tuple[Door, ...]
    objects: tuple[ObjectInstance, ...]
    pictures: tuple[Picture, ...]

    @property
    def bounds(self) -> tuple[float, float, float, float]:
        return (min(r.min_x for r in self.rooms), max(r.max_x for r in self.rooms),
                min(r.min_z for r in self.rooms), max(r.max_z for r in self.rooms))

    def categories_present(self) -> tuple[int, ...]:
        return tuple(sorted({o.category for o in self.objects}))

    def walkable_rects(self) -> list[tuple[float, float, float, float]]:
        """Rooms and door passages as (min_x, max_x, min_z, max_z)."""
        return [(r.min_x, r.max_x, r.min_z, r.max_z) for r in self.rooms] + [d.rect(self.rooms) for d in self.doors]

    def wall_segments(self) -> np.ndarray:
        """Collision / occlusion walls as 2-D segments (S, 2, 2) of (x, z) points:
        every room edge minus its door openings, plus the two jambs of each passage."""
        segs: list[tuple[tuple[float, float], tuple[float, float]]] = []
        for i, r in enumerate(self.rooms):
            # (fixed coordinate, axis, span lo, span hi) per edge; openings cut the span.
            for fixed, axis, lo, hi in ((r.max_x, "x", r.min_z, r.max_z), (r.min_x, "x", r.min_z, r.max_z),
                                        (r.min_z, "z", r.min_x, r.max_x), (r.max_z, "z", r.min_x, r.max_x)):
                cuts = sorted((d.lo, d.hi) for d in self.doors if d.axis == axis and (
                    (d.a == i and fixed == (r.max_x if axis == "x" else r.max_z))
                    or (d.b == i and fixed == (r.min_x if axis == "x" else r.min_z))))
                start = lo
                for c0, c1 in [*cuts, (hi, hi)]:
                    if c0 > start + 1e-6:
                        segs.append(((fixed, start), (fixed, c0)) if axis == "x" else ((start, fixed), (c0, fixed)))
                    start = max(start, c1)
        for d in self.doors:
            x0, x1, z0, z1 = d.rect(self.rooms)
            if d.axis == "x":
                segs += [((x0, z0), (x1, z0)), ((x0, z1), (x1, z1))]
            else:
                segs += [((x0, z0), (x0, z1)), ((x1, z0), (x1, z1))]
        return np.asarray(segs, dtype=np.float64).reshape(-1, 2, 2)


# -- generation --------------------------------------------------------------------------
def generate_layout(house_seed: int) -> HouseLayout:
    """The house of a seed: 3-6 rooms, 20-40 objects of 10-15 categories (deterministic)."""
    from icrl_ros.sim.house_nav import NavGrid  # the grid checks the layout is navigable

    rng = np.random.default_rng(np.random.SeedSequence([int(house_seed), _SALT]))
    for _ in range(100):
        rooms, doors = _floorplan(rng)
        for _ in range(10):
            objects = _place_objects(rng, rooms, doors)
            layout = HouseLayout(int(house_seed), rooms, doors, objects, ())
            grid = NavGrid(layout)
            if not grid.doors_connected():
                continue
            # Drop instances with no free cell near them in the main free component.
            objects = tuple(o for o in objects if grid.goal_mask([o]).any())
            if len(objects) >= 20 and len({o.category for o in objects}) >= 8:
                return HouseLayout(int(house_seed), rooms, doors, objects, _pictures(rng, rooms, doors))
    raise RuntimeError(f"could not generate a navigable house for seed {house_seed}")


def _floorplan(rng: np.random.Generator) -> tuple[tuple[Room, ...], tuple[Door, ...]]:
    n_rooms = int(rng.integers(3, 7))
    merge = n_rooms <= 5 and rng.random() < 0.35  # one room spans two grid cells
    n_cells = n_rooms + int(merge)
    shapes = [(c, r) for c in (2, 3) for r in (2, 3) if n_cells <= c * r <= n_cells + 3]
    cols, rows = shapes[int(rng.integers(len(shapes)))]
    xs = np.concatenate([[0.0], np.cumsum(rng.uniform(3.5, 6.0, cols))]).round(2)
    zs = np.concatenate([[0.0], np.cumsum(rng.uniform(3.5, 5.5, rows))]).round(2)

    # Grow a connected set of grid cells from a random one.
    cells = [(int(rng.integers(cols)), int(rng.integers(rows)))]
    while len(cells) < n_cells:
        frontier = sorted({(c + dc, r + dr) for c, r in cells for dc, dr in ((1, 0), (-1, 0), (0, 1), (0, -1))
                           if 0 <= c + dc < cols and 0 <= r + dr < rows} - set(cells))
        cells.append(frontier[int(rng.integers(len(frontier)))])
    # Rooms as inclusive cell-index rectangles (c0, c1, r0, r1).
    blocks = [(c, c, r, r) for c, r in cells]
    if merge:
        pairs = [(i, j) for i in range(len(blocks)) for j in range(i + 1, len(blocks))
                 if abs(blocks[i][0] - blocks[j][0]) + abs(blocks[i][2] - blocks[j][2]) == 1]
        i, j = pairs[int(rng.integers(len(pairs)))]
        bi, bj = blocks[i], blocks[j]
        merged = (min(bi[0], bj[0]), max(bi[1], bj[1]), min(bi[2], bj[2]), max(bi[3], bj[3]))
        blocks = [b for k, b in enumerate(blocks) if k not in (i, j)] + [merged]

    h = WALL_THICKNESS / 2
    rooms = tuple(Room(float(xs[c0] + h), float(xs[c1 + 1] - h), float(zs[r0] + h), float(zs[r1 + 1] - h),
                       str(rng.choice(WALL_TEXTURES)), str(rng.choice(FLOOR_TEXTURES)), str(rng.choice(CEIL_TEXTURES)))
                  for c0, c1, r0, r1 in blocks)

    # Adjacent room pairs and the span of their shared wall.
    adj = []
    for i, (a0, a1, ar0, ar1) in enumerate(blocks):
        for j, (b0, b1, br0, br1) in enumerate(blocks):
            if a1 + 1 == b0 and min(ar1, br1) >= max(ar0, br0):  # j east of i
                adj.append(("x", i, j, max(rooms[i].min_z, rooms[j].min_z), min(rooms[i].max_z, rooms[j].max_z)))
            if ar1 + 1 == br0 and min(a1, b1) >= max(a0, b0):  # j south of i
                adj.append(("z", i, j, max(rooms[i].min_x, rooms[j].min_x), min(rooms[i].max_x, rooms[j].max_x)))
    # A random spanning tree (Kruskal on shuffled edges) plus a few loops.
    parent = list(range(len(rooms)))

    def find(k: int) -> int:
        while parent[k] != k:
            k = parent[k]
        return k

    doors = []
    for e in (adj[k] for k in rng.permutation(len(adj))):
        axis, i, j, lo, hi = e
        ri, rj = find(i), find(j)
        if ri == rj and rng.random() > 0.3:
            continue
        parent[ri] = rj
        span = hi - lo
        if rng.random() < 0.2 and span > 2.5:  # open plan: a wide opening
            width = rng.uniform(0.5, 0.85) * span
        else:
            width = rng.uniform(1.1, 1.5)
        width = min(width, span - 0.4)
        start = rng.uniform(lo + 0.2, hi - 0.2 - width)
        doors.append(Door(axis, i, j, round(float(start), 3), round(float(start + width), 3), DOOR_HEIGHT))
    return rooms, tuple(doors)


def _door_zones(rooms: tuple[Room, ...], doors: tuple[Door, ...], clear: float) -> list[tuple[float, ...]]:
    """Door passages grown by ``clear`` metres into the rooms on both sides: kept free."""
    zones = []
    for d in doors:
        x0, x1, z0, z1 = d.rect(rooms)
        zones.append((x0 - clear, x1 + clear, z0 - 0.3, z1 + 0.3) if d.axis == "x"
                     else (x0 - 0.3, x1 + 0.3, z0 - clear, z1 + clear))
    return zones


PASSAGE = 0.75  # free gap kept between objects, and between objects and walls unless flush


def _place_objects(
    rng: np.random.Generator, rooms: tuple[Room, ...], doors: tuple[Door, ...]
) -> tuple[ObjectInstance, ...]:
    """20-40 instances (about one per 2.2 m^2 of floor) of 10-15 categories. Objects stand
    either flush against a wall or at least PASSAGE from walls and from each other, so
    the agent can walk around every one; door zones stay clear."""
    floor = sum(r.area for r in rooms)
    n_obj = int(np.clip(round(floor * rng.uniform(0.35, 0.55)), 20, 40))
    n_cat = int(rng.integers(10, 16))
    cats = rng.choice(len(CATEGORIES), n_cat, replace=False)
    counts = 1 + rng.multinomial(n_obj - n_cat, np.full(n_cat, 1.0 / n_cat))
    todo = [int(c) for c, k in zip(cats, counts) for _ in range(k)]
    todo = [todo[k] for k in rng.permutation(len(todo))]
    zones = _door_zones(rooms, doors, 1.0)
    area = np.array([r.area for r in rooms])
    placed: list[ObjectInstance] = []
    for ci in todo:
        cat = CATEGORIES[ci]
        for _ in range(60):
            r = rooms[int(rng.choice(len(rooms), p=area / area.sum()))]
            m = cat.radius + 0.05
            if cat.near_wall:
                side = int(rng.integers(4))
                u = rng.uniform(0, 1)
                x = {0: r.max_x - m, 1: r.min_x + m}.get(side, r.min_x + m + u * (r.max_x - r.min_x - 2 * m))
                z = {2: r.min_z + m, 3: r.max_z - m}.get(side, r.min_z + m + u * (r.max_z - r.min_z - 2 * m))
            else:
                x, z = rng.uniform(r.min_x + m, r.max_x - m), rng.uniform(r.min_z + m, r.max_z - m)
                # Too close to a wall to pass behind: push it flush against that wall.
                x = r.min_x + m if x - r.min_x < m + PASSAGE else (r.max_x - m if r.max_x - x < m + PASSAGE else x)
                z = r.min_z + m if z - r.min_z < m + PASSAGE else (r.max_z - m if r.max_z - z < m + PASSAGE else z)
            if any(x0 - cat.radius < x < x1 + cat.radius and z0 - cat.radius < z < z1 + cat.radius
                   for x0, x1, z0, z1 in zones):
                continue
            if any(math.hypot(x - o.x, z - o.z) < cat.radius + o.cat.radius + PASSAGE for o in placed):
                continue
            placed.append(ObjectInstance(ci, round(float(x), 3), round(float(z), 3),
                                         round(float(rng.uniform(-math.pi, math.pi)), 3)))
            break
    return tuple(placed)


def _pictures(rng: np.random.Generator, rooms: tuple[Room, ...], doors: tuple[Door, ...]) -> tuple[Picture, ...]:
    names = portrait_names()
    zones = _door_zones(rooms, doors, 0.05)
    out: list[Picture] = []
    n_pictures = int(rng.integers(2, 7))
    for _ in range(60):
        if len(out) >= n_pictures or not names:
            break
        r = rooms[int(rng.integers(len(rooms)))]
        width = float(rng.uniform(0.6, 1.0))
        side = int(rng.integers(4))
        u = float(rng.uniform(0.15, 0.85))
        # yaw points into the room: east wall faces -x (pi), west +x (0), north +z (-pi/2), south -z.
        along_z, along_x = r.min_z + u * (r.max_z - r.min_z), r.min_x + u * (r.max_x - r.min_x)
        x, z, yaw = {0: (r.max_x, along_z, math.pi), 1: (r.min_x, along_z, 0.0),
                     2: (along_x, r.min_z, -math.pi / 2), 3: (along_x, r.max_z, math.pi / 2)}[side]
        half = width / 2 + 0.1
        if any(x0 - half < x < x1 + half and z0 - half < z < z1 + half for x0, x1, z0, z1 in zones):
            continue
        if any(math.hypot(x - p.x, z - p.z) < half + p.width / 2 for p in out):
            continue
        out.append(Picture(round(x, 3), round(z, 3), yaw, names[int(rng.integers(len(names)))], round(width, 3)))
    return tuple(out)
