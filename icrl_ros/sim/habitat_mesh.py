"""Our generated houses as Habitat stage meshes (numpy + trimesh, no habitat-sim): ``write_glb``.

Geometry and looks follow the MiniWorld house (``house_layout``, ``house_render``): the same floorplan
and wall / door heights, objects at their positions and yaws with their categories' sizes and colours
(balls and boxes as MiniWorld draws them, keys and furniture from MiniWorld's own mesh files and
textures), the room textures tiled at MiniWorld's density, and MiniWorld's lighting (one point light
over the house, per-vertex ambient + diffuse) baked in, since habitat-sim draws a plain glb stage
unlit: into the textures of walls, floors, ceilings and pictures, and into the objects' per-vertex
colours (glTF COLOR_0, which habitat-sim 0.2.2 multiplies with the material's colour and texture and
interpolates across each face, as MiniWorld's Gouraud shading). Coordinates are MiniWorld's (x east,
y up, z south), which are also habitat's world axes. habitat-sim reads a plain .glb stage Z-up, so the
Y-up mesh is turned +90 deg about x before it is written. ``habitat_scene`` adds the navmesh and the episodes.

A :class:`Look` says how the house is drawn: ``miniworld`` (the default) as above, ``unseen`` a proxy for a
camera the encoder never trained on: room textures from MiniWorld files no training house uses (each room
swaps its own for one of them), another light (dimmer ambient, stronger diffuse, lower, warm-tinted) and
object textures desaturated under that light. Geometry, object colours' names and episodes do not change.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from icrl_ros.sim.house_layout import (CEIL_TEXTURES, DOOR_HEIGHT, FLOOR_TEXTURES, WALL_HEIGHT, WALL_TEXTURES,
                                       HouseLayout, miniworld_dir)
from icrl_ros.sim.house_render import PICTURE_HEIGHT  # a constant: house_render loads GL only when drawing

PICTURE_DEPTH = 0.05  # MiniWorld's ImageFrame default depth (house_render does not set it)

TEX_DENSITY = 512  # MiniWorld's texels per metre of wall and floor
# MiniWorld's fixed-function lighting (house_render): OpenGL's default global ambient 0.2 + the light's
# ambient 0.5 + diffuse 0.6 * max(0, n . l) from a point light 4 m up over the house's centre, per vertex
# and interpolated across each quad. habitat-sim 0.2.2 draws a glb stage unlit, so the lighting is baked
# into each room surface's texture at BAKE_PX_PER_M and into the objects' vertex colours (miniworld_lit).
LIGHT_AMBIENT, LIGHT_DIFFUSE, LIGHT_HEIGHT = 0.2 + 0.5, 0.6, 4.0
BAKE_PX_PER_M = 64
# MiniWorld's entity.COLORS (balls and boxes are drawn in these exact colours).
MINIWORLD_RGB = {"red": (1.0, 0.0, 0.0), "green": (0.0, 1.0, 0.0), "blue": (0.0, 0.0, 1.0),
                 "purple": (0.44, 0.15, 0.76), "yellow": (1.0, 1.0, 0.0), "grey": (0.39, 0.39, 0.39)}


@dataclass(frozen=True)
class Look:
    """How a house is drawn: room textures (None: the layout's own; else each room's texture is replaced by one
    of these MiniWorld texture stems, chosen by the room and the original), the light (ambient, diffuse, height
    over the house's centre, RGB tint) and how much object textures are desaturated (0: as they are)."""

    name: str
    walls: tuple[str, ...] | None = None
    floors: tuple[str, ...] | None = None
    ceilings: tuple[str, ...] | None = None
    ambient: float = LIGHT_AMBIENT
    diffuse: float = LIGHT_DIFFUSE
    height: float = LIGHT_HEIGHT
    tint: tuple[float, float, float] = (1.0, 1.0, 1.0)
    desaturate: float = 0.0

    def texture(self, kind: str, original: str, room: int) -> str:
        options = {"wall": self.walls, "floor": self.floors, "ceiling": self.ceilings}[kind]
        if not options:
            return original
        return options[zlib.crc32(f"{kind}/{original}/{room}".encode()) % len(options)]

    def light(self, f: np.ndarray) -> np.ndarray:
        """Brightness factors (N,) -> RGB factors (N, 3) under the tint."""
        return np.asarray(f, np.float64)[..., None] * np.asarray(self.tint)


LOOKS = {
    "miniworld": Look("miniworld"),
    # No training house uses these files (house_layout's WALL_ / FLOOR_ / CEIL_TEXTURES); the light is dimmer in
    # the shade and brighter towards it, hangs lower and is warm, as an indoor lamp against MiniWorld's white one.
    "unseen": Look("unseen", walls=("concrete_2", "concrete_4", "cardboard_1", "rock_1", "asphalt_1"),
                   floors=("concrete_2", "cardboard_2", "asphalt_1", "rock_1", "concrete_4"),
                   ceilings=("concrete_4", "cardboard_1", "concrete_2"),
                   ambient=0.5, diffuse=0.85, height=3.0, tint=(1.0, 0.9, 0.75), desaturate=0.4),
}
TRAINING_TEXTURES = frozenset(WALL_TEXTURES + FLOOR_TEXTURES + CEIL_TEXTURES)


def look_named(name: str) -> Look:
    if name not in LOOKS:
        raise ValueError(f"look: {name!r} is not one of {sorted(LOOKS)}")
    return LOOKS[name]



def _trimesh():
    try:
        import trimesh
    except ImportError as e:
        raise ImportError("the Habitat scene export needs trimesh (installed in the Habitat chroot: "
                          "scripts/habitat_prepare.sh)") from e
    return trimesh


class _Textures:
    """MiniWorld texture images by name, loaded once (PIL images)."""

    def __init__(self) -> None:
        self.root = miniworld_dir() / "textures"
        self.cache: dict[str, object] = {}

    def get(self, name: str):
        if name not in self.cache:
            from PIL import Image

            self.cache[name] = Image.open(self.root / f"{name}.png").convert("RGB")
        return self.cache[name]

    def black(self):
        """A plain black texture (MiniWorld draws the sides of a picture frame black, unlit)."""
        if "_black" not in self.cache:
            from PIL import Image

            self.cache["_black"] = Image.new("RGB", (4, 4))
        return self.cache["_black"]


def _quad(trimesh, corners: np.ndarray, uv: np.ndarray, image, double_sided: bool = True):
    """A textured quad: corners (4, 3) counter-clockwise seen from its front, uv (4, 2)."""
    mat = trimesh.visual.material.PBRMaterial(baseColorTexture=image, metallicFactor=0.0, roughnessFactor=1.0)
    faces = [[0, 1, 2], [0, 2, 3]]
    if double_sided:  # habitat-sim 0.2.2 ignores glTF's doubleSided and culls back faces: add the back
        corners, uv = np.concatenate([corners, corners]), np.concatenate([uv, uv])
        faces += [[4, 6, 5], [4, 7, 6]]
    mesh = trimesh.Trimesh(vertices=corners, faces=faces, process=False)
    mesh.visual = trimesh.visual.TextureVisuals(uv=uv, material=mat)
    return mesh


def _lighting(points: np.ndarray, normal: np.ndarray, light: np.ndarray, look: Look = LOOKS["miniworld"]) -> np.ndarray:
    """MiniWorld's per-vertex brightness at ``points`` (N, 3) of a surface facing ``normal`` (N, 3 RGB:
    ``look``'s light, MiniWorld's by default)."""
    d = light - points
    d = d / np.linalg.norm(d, axis=1, keepdims=True)
    return np.clip(look.light(look.ambient + look.diffuse * np.maximum(d @ normal, 0.0)), 0.0, 1.0)


def _baked(image, width_m: float, height_m: float, offset_m: tuple[float, float], corner_light: np.ndarray):
    """The texture tiled at MiniWorld's density over a width x height surface (texture coordinates
    starting at ``offset_m``) times the bilinear interpolation of the lighting at its corners
    (bottom-left, bottom-right, top-right, top-left): one image with uv (0, 0) at the bottom-left."""
    from PIL import Image

    W, H = max(int(round(width_m * BAKE_PX_PER_M)), 4), max(int(round(height_m * BAKE_PX_PER_M)), 4)
    w, h = image.size
    small = image.resize((max(w * BAKE_PX_PER_M // TEX_DENSITY, 1), max(h * BAKE_PX_PER_M // TEX_DENSITY, 1)),
                         Image.Resampling.BOX)
    tex = np.flipud(np.asarray(small, np.float64))  # row 0 = v 0 (the texture's bottom), as GL samples it
    sh, sw = tex.shape[:2]
    ox, oy = int(round(offset_m[0] * BAKE_PX_PER_M)) % sw, int(round(offset_m[1] * BAKE_PX_PER_M)) % sh
    tiled = np.tile(tex, ((H + oy) // sh + 1, (W + ox) // sw + 1, 1))[oy:oy + H, ox:ox + W]
    return Image.fromarray(np.flipud(tiled * _bilinear(corner_light, W, H)).clip(0, 255).astype(np.uint8))


def _lit_picture(image, width_m: float, height_m: float, corner_light: np.ndarray):
    """A painting (shown once, not tiled) times the bilinear lighting of its corners."""
    from PIL import Image

    W, H = max(int(round(width_m * BAKE_PX_PER_M)), 4), max(int(round(height_m * BAKE_PX_PER_M)), 4)
    arr = np.flipud(np.asarray(image.resize((W, H), Image.Resampling.BOX), np.float64))  # row 0 = bottom
    return Image.fromarray(np.flipud(arr * _bilinear(corner_light, W, H)).clip(0, 255).astype(np.uint8))


def _bilinear(corner_light: np.ndarray, W: int, H: int) -> np.ndarray:
    """The RGB lighting (4, 3) at a surface's corners (bottom-left, bottom-right, top-right, top-left)
    interpolated over a W x H image, row 0 at the bottom: (H, W, 3)."""
    s_, t_ = (np.arange(W) + 0.5) / W, (np.arange(H) + 0.5) / H
    bl, br, tr, tl = np.asarray(corner_light, np.float64)
    return ((1 - t_)[:, None, None] * ((1 - s_)[:, None] * bl + s_[:, None] * br)[None]
            + t_[:, None, None] * ((1 - s_)[:, None] * tl + s_[:, None] * tr)[None])


UNIT_UV = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])


def _wall(trimesh, image, a: tuple[float, float], b: tuple[float, float], y0: float, y1: float,
          normal: tuple[float, float], light: np.ndarray, look: Look = LOOKS["miniworld"]):
    """A vertical wall quad from floor point a to b (x, z), heights y0..y1, facing ``normal`` (x, z),
    textured and lit as MiniWorld draws it."""
    (ax, az), (bx, bz) = a, b
    length = math.hypot(bx - ax, bz - az)
    corners = np.array([[ax, y0, az], [bx, y0, bz], [bx, y1, bz], [ax, y1, az]], np.float64)
    lit = _lighting(corners, np.array([normal[0], 0.0, normal[1]]), light, look)
    return _quad(trimesh, corners, UNIT_UV, _baked(image, length, y1 - y0, (0.0, y0), lit))


def _flat(trimesh, image, x0: float, x1: float, z0: float, z1: float, y: float, up: bool, light: np.ndarray,
          look: Look = LOOKS["miniworld"]):
    """A floor (facing up) or ceiling (facing down) rectangle, textured by world x, z and lit."""
    corners = np.array([[x0, y, z0], [x1, y, z0], [x1, y, z1], [x0, y, z1]], np.float64)
    lit = _lighting(corners, np.array([0.0, 1.0 if up else -1.0, 0.0]), light, look)
    mesh = _quad(trimesh, corners, UNIT_UV, _baked(image, x1 - x0, z1 - z0, (x0, z0), lit), double_sided=False)
    if up:  # (x0, z0) -> (x1, z0) -> (x1, z1) winds clockwise seen from above: turn the floor's faces up
        mesh.faces = mesh.faces[:, ::-1]
    return mesh


def _room_edges(layout: HouseLayout, i: int):
    """(start, end, door spans) for the four walls of room i, each from one corner to the next."""
    r = layout.rooms[i]
    edges = (  # (fixed axis, fixed value, span lo, span hi, doors cutting this edge)
        ("x", r.max_x, r.min_z, r.max_z, [d for d in layout.doors if d.axis == "x" and d.a == i]),
        ("x", r.min_x, r.min_z, r.max_z, [d for d in layout.doors if d.axis == "x" and d.b == i]),
        ("z", r.min_z, r.min_x, r.max_x, [d for d in layout.doors if d.axis == "z" and d.b == i]),
        ("z", r.max_z, r.min_x, r.max_x, [d for d in layout.doors if d.axis == "z" and d.a == i]),
    )
    for axis, fixed, lo, hi, doors in edges:
        pt = (lambda s, f=fixed: (f, s)) if axis == "x" else (lambda s, f=fixed: (s, f))
        yield pt, lo, hi, sorted((d.lo, d.hi) for d in doors)


def _miniworld_obj(name: str, height: float) -> tuple[float, list[dict]]:
    """A MiniWorld mesh as ``objmesh.ObjMesh`` reads and draws it, at ``height``: (MiniWorld's scale,
    chunks), a chunk per material (faces sorted by material name as MiniWorld sorts them) with its
    face corners ``v`` (N, 3, 3) in metres (base on y = 0, centred by MiniWorld's rule), ``uv`` (N, 3, 2),
    the file's unit normals ``n`` (N, 3, 3), the material's diffuse colour ``kd`` and texture file or
    None. The default material is white with ``meshes/<name>.png``; an .mtl's ``Kd`` / ``map_Kd``
    where the .mtl exists (most .obj files name an .mtl that is not shipped)."""
    folder = miniworld_dir() / "meshes"
    default = {"Kd": (1.0, 1.0, 1.0)}
    if (folder / f"{name}.png").exists():
        default["map_Kd"] = folder / f"{name}.png"
    materials, cur = {"": default}, None
    mtl = folder / f"{name}.mtl"
    if mtl.exists():
        for line in mtl.read_text().splitlines():
            t = line.split()
            if not t or t[0].startswith("#"):
                continue
            if t[0] == "newmtl":
                cur = materials[t[1]] = {}
            elif t[0] == "Kd":
                cur["Kd"] = tuple(float(v) for v in t[1:4])
            elif t[0] == "map_Kd":
                cur["map_Kd"] = folder / t[-1]
    verts, texs, norms, faces, mat = [], [], [], [], ""
    for line in (folder / f"{name}.obj").read_text().splitlines():
        t = line.split()
        if not t or t[0].startswith("#"):
            continue
        if t[0] == "v":
            verts.append([float(v) for v in t[1:4]])
        elif t[0] == "vt":
            texs.append([float(v) for v in t[1:3]])
        elif t[0] == "vn":
            norms.append([float(v) for v in t[1:4]])
        elif t[0] == "usemtl":
            mat = t[1] if t[1] in materials else ""
        elif t[0] == "f":
            corners = [[int(i) for i in tok.split("/") if i] for tok in t[1:]]
            faces.append((mat, corners))
    faces.sort(key=lambda f: f[0])  # stable, as MiniWorld's sort
    verts, norms = np.array(verts, np.float64), np.array(norms, np.float64)
    texs = np.array(texs or [[0.0, 0.0]], np.float64)
    v = np.array([[verts[c[0] - 1] for c in f] for _, f in faces])
    n = np.array([[norms[c[-1] - 1] for c in f] for _, f in faces])
    uv = np.array([[texs[c[1] - 1] if len(c) == 3 else (0.0, 0.0) for c in f] for _, f in faces])
    lo, hi_min = v.min(axis=(0, 1)), v.max(axis=0).min(axis=0)  # MiniWorld's centring, quirk included
    mid = (lo + hi_min) / 2
    v = v - np.array([mid[0], lo[1], mid[2]])
    scale = height / v[..., 1].max()
    names = np.array([m for m, _ in faces])
    chunks = []
    for m in dict.fromkeys(names):
        sel = names == m
        tex, kd = materials[m].get("map_Kd"), materials[m].get("Kd", (1.0, 1.0, 1.0))
        chunks.append({"v": v[sel] * scale, "uv": uv[sel], "n": n[sel], "kd": np.array(kd, np.float64),
                       "texture": tex if tex is not None and Path(tex).exists() else None})
    return scale, chunks


def miniworld_lit(colour: np.ndarray, points: np.ndarray, normals: np.ndarray, light: np.ndarray,
                  look: Look = LOOKS["miniworld"]) -> np.ndarray:
    """MiniWorld's fixed-function colour (house_render: GL_COLOR_MATERIAL, ambient and diffuse from the
    current colour) at ``points`` (N, 3) with ``normals`` (N, 3) as GL gets them: not normalized
    (MiniWorld draws a mesh under glScalef without GL_NORMALIZE, so its normals are 1 / scale long):
    clip(colour * (0.7 + 0.6 * max(0, n . l)), 0, 1), l the unit direction to the light."""
    d = light - points
    d = d / np.linalg.norm(d, axis=1, keepdims=True)
    f = look.light(look.ambient + look.diffuse * np.maximum((d * normals).sum(1), 0.0))
    return np.clip(np.asarray(colour, np.float64)[None, :] * f, 0.0, 1.0)


def _vertex_lit(trimesh, vertices: np.ndarray, rgb: np.ndarray, uv=None, image=None):
    """A triangle soup (3 vertices a face, in order) whose vertices carry ``rgb`` (N, 3) in [0, 1] as
    glTF COLOR_0 over a white material, textured by ``image`` at ``uv`` if given: habitat-sim draws the
    colour times the texture, interpolated across each face, as MiniWorld's Gouraud shading."""
    mesh = trimesh.Trimesh(vertices=vertices, faces=np.arange(len(vertices)).reshape(-1, 3), process=False)
    mat = trimesh.visual.material.PBRMaterial(baseColorFactor=[1.0, 1.0, 1.0, 1.0], baseColorTexture=image,
                                              metallicFactor=0.0, roughnessFactor=1.0)
    mesh.visual = trimesh.visual.TextureVisuals(uv=uv if image is not None else None, material=mat)
    rgba = np.concatenate([np.round(rgb * 255), np.full((len(rgb), 1), 255.0)], axis=1)
    mesh.visual.vertex_attributes["color"] = rgba.astype(np.uint8)
    return mesh


def _object_parts(trimesh, o, light: np.ndarray, cache: dict, look: Look = LOOKS["miniworld"]) -> list:
    """Object ``o`` placed at its pose (yaw about +y, then its floor position) as MiniWorld draws it,
    lit by MiniWorld's per-vertex lighting baked into vertex colours: a ball (smooth normals), a box
    (one normal a side, as MiniWorld's drawBox) or a MiniWorld mesh (the file's normals, 1 / scale long)."""
    cat = o.cat
    rot = trimesh.transformations.rotation_matrix(o.yaw, [0.0, 1.0, 0.0])[:3, :3]
    place = np.array([o.x, 0.0, o.z])
    if cat.shape in ("ball", "box"):
        if cat.shape == "ball":
            m = trimesh.creation.icosphere(subdivisions=2, radius=cat.height / 2)
            v = m.vertices[m.faces].reshape(-1, 3)  # a triangle soup; normals radial (smooth)
            n = v / np.linalg.norm(v, axis=1, keepdims=True)
        else:
            m = trimesh.creation.box(extents=[cat.height] * 3)
            v = m.vertices[m.faces].reshape(-1, 3)
            n = np.repeat(m.face_normals, 3, axis=0)  # flat sides, lit per corner
        v = (v + [0.0, cat.height / 2, 0.0]) @ rot.T + place
        rgb = miniworld_lit(MINIWORLD_RGB[cat.color], v, n @ rot.T, light, look)
        return [_vertex_lit(trimesh, v, rgb)]
    name = f"key_{cat.color}" if cat.shape == "key" else cat.shape
    if name not in cache:
        from PIL import Image

        scale, chunks = _miniworld_obj(name, cat.height)
        for c in chunks:
            c["image"] = _desaturated(Image.open(c["texture"]).convert("RGB"), look.desaturate) \
                if c["texture"] is not None else None
        cache[name] = (scale, chunks)
    scale, chunks = cache[name]
    parts = []
    for c in chunks:
        v = c["v"].reshape(-1, 3) @ rot.T + place
        n = c["n"].reshape(-1, 3) @ rot.T / scale
        rgb = miniworld_lit(c["kd"], v, n, light, look)
        parts.append(_vertex_lit(trimesh, v, rgb, c["uv"].reshape(-1, 2), c["image"]))
    return parts


def _desaturated(image, amount: float):
    """``image`` blended ``amount`` of the way to its grey (0: the image itself)."""
    if not amount:
        return image
    from PIL import Image

    arr = np.asarray(image, np.float64)
    grey = arr @ np.array([0.299, 0.587, 0.114])
    return Image.fromarray(((1 - amount) * arr + amount * grey[..., None]).clip(0, 255).astype(np.uint8))


def house_scene(layout: HouseLayout, objects: str = "meshes", look: Look | str = "miniworld"):
    """The house as a trimesh Scene, Y-up, in MiniWorld's coordinates (metres). ``objects``: ``meshes``
    (what the camera sees) or ``discs`` (the house's collision model: each object an upright cylinder of
    its footprint radius and height, which is what the navmesh is built from); ``look``: a :class:`Look` or a
    name in :data:`LOOKS`."""
    look = look_named(look) if isinstance(look, str) else look
    if objects not in ("meshes", "discs"):
        raise ValueError(f"objects must be 'meshes' or 'discs', got {objects!r}")
    trimesh = _trimesh()
    tex = _Textures()
    scene = trimesh.Scene()
    min_x, max_x, min_z, max_z = layout.bounds
    light = np.array([(min_x + max_x) / 2, look.height, (min_z + max_z) / 2])  # house_render's light_pos
    inward = ((-1.0, 0.0), (1.0, 0.0), (0.0, 1.0), (0.0, -1.0))  # _room_edges' order: east, west, north, south
    for i, r in enumerate(layout.rooms):
        wall, floor, ceil = room_textures(tex, look, layout, i)
        scene.add_geometry(_flat(trimesh, floor, r.min_x, r.max_x, r.min_z, r.max_z, 0.0, True, light, look),
                           f"floor_{i}")
        scene.add_geometry(_flat(trimesh, ceil, r.min_x, r.max_x, r.min_z, r.max_z, WALL_HEIGHT, False, light, look),
                           f"ceiling_{i}")
        for k, (pt, lo, hi, cuts) in enumerate(_room_edges(layout, i)):
            start = lo
            for c0, c1 in [*cuts, (hi, hi)]:
                if c0 > start + 1e-6:  # a full-height piece between openings
                    scene.add_geometry(_wall(trimesh, wall, pt(start), pt(c0), 0.0, WALL_HEIGHT, inward[k], light,
                                             look), f"wall_{i}_{k}_{start:.2f}")
                if c1 > c0:  # the lintel above a door opening
                    scene.add_geometry(_wall(trimesh, wall, pt(c0), pt(c1), DOOR_HEIGHT, WALL_HEIGHT, inward[k],
                                             light, look), f"lintel_{i}_{k}_{c0:.2f}")
                start = max(start, c1)
    for k, d in enumerate(layout.doors):  # the passage through the wall: floor, jambs, ceiling
        wall, floor, ceil = room_textures(tex, look, layout, d.a)
        x0, x1, z0, z1 = d.rect(layout.rooms)
        scene.add_geometry(_flat(trimesh, floor, x0, x1, z0, z1, 0.0, True, light, look), f"door_floor_{k}")
        scene.add_geometry(_flat(trimesh, ceil, x0, x1, z0, z1, DOOR_HEIGHT, False, light, look), f"door_ceiling_{k}")
        # the two jambs (a, b, normal into the passage)
        jambs = ((((x0, z0), (x1, z0), (0.0, 1.0)), ((x0, z1), (x1, z1), (0.0, -1.0))) if d.axis == "x" else
                 (((x0, z0), (x0, z1), (1.0, 0.0)), ((x1, z0), (x1, z1), (-1.0, 0.0))))
        for j, (a, b, n) in enumerate(jambs):
            scene.add_geometry(_wall(trimesh, wall, a, b, 0.0, DOOR_HEIGHT, n, light, look), f"door_jamb_{k}_{j}")
    for k, p in enumerate(layout.pictures):
        image = tex.get(p.tex)
        w, h = image.size
        half, height = p.width / 2, p.width * h / w
        # yaw points into the room; the picture's left-to-right runs along (sin yaw, cos yaw) in (x, z).
        # MiniWorld's ImageFrame is a box PICTURE_DEPTH deep standing 1 cm off the wall: the painting on
        # its front face, its four sides black (the dark border it shows from an angle).
        nx, nz = math.cos(p.yaw), -math.sin(p.yaw)
        bx, bz = p.x + 0.01 * nx, p.z + 0.01 * nz  # the box's back, 1 cm off the wall
        cx, cz = bx + PICTURE_DEPTH * nx, bz + PICTURE_DEPTH * nz  # its front face
        sx, sz = math.sin(p.yaw), math.cos(p.yaw)
        y0, y1 = PICTURE_HEIGHT - height / 2, PICTURE_HEIGHT + height / 2
        corners = np.array([[cx - half * sx, y0, cz - half * sz], [cx + half * sx, y0, cz + half * sz],
                            [cx + half * sx, y1, cz + half * sz], [cx - half * sx, y1, cz - half * sz]])
        lit = _lighting(corners, np.array([nx, 0.0, nz]), light, look)
        scene.add_geometry(_quad(trimesh, corners, UNIT_UV, _lit_picture(image, p.width, height, lit)),
                           f"picture_{k}")
        for j, (e0, e1) in enumerate(((0, 3), (1, 2), (3, 2), (0, 1))):  # left, right, top, bottom edges
            front = corners[[e0, e1]]
            back = front - PICTURE_DEPTH * np.array([nx, 0.0, nz])
            side = np.array([back[0], front[0], front[1], back[1]])
            scene.add_geometry(_quad(trimesh, side, UNIT_UV, tex.black()), f"picture_{k}_side_{j}")
    meshes: dict = {}
    for k, o in enumerate(layout.objects):
        if objects == "discs":  # circumscribed, so the polygon holds the whole disc HouseEnv collides with
            sections = 32
            disc = trimesh.creation.cylinder(radius=o.cat.radius / math.cos(math.pi / sections), height=o.cat.height,
                                             sections=sections)  # along z
            disc.apply_transform(trimesh.transformations.rotation_matrix(-math.pi / 2, [1.0, 0.0, 0.0]))  # along y
            disc.apply_translation([o.x, o.cat.height / 2, o.z])
            scene.add_geometry(disc, f"object_{k}_{o.cat.name}_disc")
            continue
        for j, part in enumerate(_object_parts(trimesh, o, light, meshes, look)):
            scene.add_geometry(part, f"object_{k}_{o.cat.name}_{j}")
    return scene


def room_textures(tex: _Textures, look: Look, layout: HouseLayout, i: int) -> tuple:
    """Wall, floor and ceiling images of room i under ``look``."""
    r = layout.rooms[i]
    return (tex.get(look.texture("wall", r.wall_tex, i)), tex.get(look.texture("floor", r.floor_tex, i)),
            tex.get(look.texture("ceiling", r.ceil_tex, i)))


def write_glb(layout: HouseLayout, path: str | Path, objects: str = "meshes", look: Look | str = "miniworld") -> Path:
    """Write the house stage as a .glb habitat-sim 0.2.2 loads (Z-up: turned +90 deg about x);
    ``objects`` and ``look`` as in ``house_scene``."""
    trimesh = _trimesh()
    scene = house_scene(layout, objects, look)
    scene.apply_transform(trimesh.transformations.rotation_matrix(math.pi / 2, [1.0, 0.0, 0.0]))  # (x,y,z)->(x,-z,y)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(scene.export(file_type="glb"))
    return path
