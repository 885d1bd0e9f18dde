"""Our generated houses as Habitat stage meshes (numpy + trimesh, no habitat-sim): ``write_glb``.

Geometry and looks follow the MiniWorld house (``house_layout``, ``house_render``): the same floorplan
and wall / door heights, objects at their positions and yaws with their categories' sizes and colours
(balls and boxes as MiniWorld draws them, keys and furniture from MiniWorld's own mesh files and
textures), the room textures tiled at MiniWorld's density, and MiniWorld's lighting (one point light
over the house, per-vertex ambient + diffuse) baked into the textures and colours, since habitat-sim
draws a plain glb stage unlit. Coordinates are MiniWorld's (x east, y up, z south), which are also
habitat's world axes. habitat-sim reads a plain .glb stage Z-up, so the Y-up mesh is turned +90 deg
about x before it is written. ``habitat_scene`` adds the navmesh and the episodes.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from icrl_ros.sim.house_layout import DOOR_HEIGHT, WALL_HEIGHT, HouseLayout, miniworld_dir
from icrl_ros.sim.house_render import PICTURE_HEIGHT  # a constant: house_render loads GL only when drawing

TEX_DENSITY = 512  # MiniWorld's texels per metre of wall and floor
# MiniWorld's fixed-function lighting (house_render): OpenGL's default global ambient 0.2 + the light's
# ambient 0.5 + diffuse 0.6 * max(0, n . l) from a point light 4 m up over the house's centre, per vertex
# and interpolated across each quad. habitat-sim 0.2.2 draws a glb stage unlit, so the lighting is baked
# into each surface's texture at BAKE_PX_PER_M.
LIGHT_AMBIENT, LIGHT_DIFFUSE, LIGHT_HEIGHT = 0.2 + 0.5, 0.6, 4.0
BAKE_PX_PER_M = 64
# MiniWorld's entity.COLORS (balls and boxes are drawn in these exact colours).
MINIWORLD_RGB = {"red": (1.0, 0.0, 0.0), "green": (0.0, 1.0, 0.0), "blue": (0.0, 0.0, 1.0),
                 "purple": (0.44, 0.15, 0.76), "yellow": (1.0, 1.0, 0.0), "grey": (0.39, 0.39, 0.39)}



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


def _lighting(points: np.ndarray, normal: np.ndarray, light: np.ndarray) -> np.ndarray:
    """MiniWorld's per-vertex brightness at ``points`` (N, 3) of a surface facing ``normal``."""
    d = light - points
    d = d / np.linalg.norm(d, axis=1, keepdims=True)
    return np.clip(LIGHT_AMBIENT + LIGHT_DIFFUSE * np.maximum(d @ normal, 0.0), 0.0, 1.0)


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
    s_, t_ = (np.arange(W) + 0.5) / W, (np.arange(H) + 0.5) / H
    bl, br, tr, tl = corner_light
    light = (1 - t_)[:, None] * ((1 - s_) * bl + s_ * br)[None, :] + t_[:, None] * ((1 - s_) * tl + s_ * tr)[None, :]
    return Image.fromarray(np.flipud(tiled * light[..., None]).clip(0, 255).astype(np.uint8))


def _lit_picture(image, width_m: float, height_m: float, corner_light: np.ndarray):
    """A painting (shown once, not tiled) times the bilinear lighting of its corners."""
    from PIL import Image

    W, H = max(int(round(width_m * BAKE_PX_PER_M)), 4), max(int(round(height_m * BAKE_PX_PER_M)), 4)
    arr = np.flipud(np.asarray(image.resize((W, H), Image.Resampling.BOX), np.float64))  # row 0 = bottom
    s_, t_ = (np.arange(W) + 0.5) / W, (np.arange(H) + 0.5) / H
    bl, br, tr, tl = corner_light
    light = (1 - t_)[:, None] * ((1 - s_) * bl + s_ * br)[None, :] + t_[:, None] * ((1 - s_) * tl + s_ * tr)[None, :]
    return Image.fromarray(np.flipud(arr * light[..., None]).clip(0, 255).astype(np.uint8))


UNIT_UV = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])


def _wall(trimesh, image, a: tuple[float, float], b: tuple[float, float], y0: float, y1: float,
          normal: tuple[float, float], light: np.ndarray):
    """A vertical wall quad from floor point a to b (x, z), heights y0..y1, facing ``normal`` (x, z),
    textured and lit as MiniWorld draws it."""
    (ax, az), (bx, bz) = a, b
    length = math.hypot(bx - ax, bz - az)
    corners = np.array([[ax, y0, az], [bx, y0, bz], [bx, y1, bz], [ax, y1, az]], np.float64)
    lit = _lighting(corners, np.array([normal[0], 0.0, normal[1]]), light)
    return _quad(trimesh, corners, UNIT_UV, _baked(image, length, y1 - y0, (0.0, y0), lit))


def _flat(trimesh, image, x0: float, x1: float, z0: float, z1: float, y: float, up: bool, light: np.ndarray):
    """A floor (facing up) or ceiling (facing down) rectangle, textured by world x, z and lit."""
    corners = np.array([[x0, y, z0], [x1, y, z0], [x1, y, z1], [x0, y, z1]], np.float64)
    lit = _lighting(corners, np.array([0.0, 1.0 if up else -1.0, 0.0]), light)
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


def _miniworld_material(folder: Path, name: str):
    """(diffuse colour, texture image or None) of a MiniWorld mesh, by MiniWorld's own rule: white and
    ``meshes/<name>.png`` by default, the .mtl's ``Kd`` / ``map_Kd`` where an .mtl exists (most .obj
    files name an .mtl that is not shipped, which left trimesh with no material: black objects)."""
    from PIL import Image

    kd, tex = (1.0, 1.0, 1.0), folder / f"{name}.png"
    mtl = folder / f"{name}.mtl"
    if mtl.exists():
        materials = 0
        for line in mtl.read_text().splitlines():
            parts = line.split()
            materials += parts[:1] == ["newmtl"]
            if materials > 1:
                break  # the first material's: the shipped meshes use one colour / texture each
            if parts[:1] == ["Kd"]:
                kd = tuple(float(v) for v in parts[1:4])
            elif parts[:1] == ["map_Kd"]:
                tex = folder / parts[1]
    return kd, (Image.open(tex).convert("RGB") if tex.exists() else None)


def _object_mesh(trimesh, cat, meshes: dict):
    """The category's model at the origin, yaw 0, base on y = 0 (as MiniWorld draws it)."""
    if cat.shape == "ball":
        m = trimesh.creation.icosphere(subdivisions=2, radius=cat.height / 2)
        m.apply_translation([0.0, cat.height / 2, 0.0])
        rgb = MINIWORLD_RGB[cat.color]
    elif cat.shape == "box":
        m = trimesh.creation.box(extents=[cat.height] * 3)
        m.apply_translation([0.0, cat.height / 2, 0.0])
        rgb = MINIWORLD_RGB[cat.color]
    else:
        name = f"key_{cat.color}" if cat.shape == "key" else cat.shape
        if name not in meshes:
            folder = miniworld_dir() / "meshes"
            loaded = trimesh.load(folder / f"{name}.obj", force="mesh", process=False)
            lo, hi = loaded.bounds
            loaded.apply_translation([-(lo[0] + hi[0]) / 2, -lo[1], -(lo[2] + hi[2]) / 2])
            loaded.apply_scale(cat.height / (hi[1] - lo[1]))  # MiniWorld scales a mesh to the height
            kd, image = _miniworld_material(folder, name)
            material = trimesh.visual.material.PBRMaterial(baseColorFactor=[*kd, 1.0], baseColorTexture=image,
                                                           metallicFactor=0.0, roughnessFactor=1.0)
            loaded.visual = trimesh.visual.TextureVisuals(uv=loaded.visual.uv, material=material)
            meshes[name] = loaded
        return meshes[name].copy()
    m.visual = trimesh.visual.TextureVisuals(material=trimesh.visual.material.PBRMaterial(
        baseColorFactor=[*rgb, 1.0], metallicFactor=0.0, roughnessFactor=1.0))
    return m


def _lit_solid(trimesh, mesh, rgb: tuple[float, float, float], light: np.ndarray, flat: bool) -> list:
    """A single-colour mesh with MiniWorld's lighting folded into its colour: a box one part per face
    (flat shading, lit at the face's centre), a ball one colour (its vertices' mean lighting; MiniWorld
    shades it smoothly). Vertex colours would be closer but render near-black in habitat-sim 0.2.2."""
    def part(m, brightness: float):
        m.visual = trimesh.visual.TextureVisuals(material=trimesh.visual.material.PBRMaterial(
            baseColorFactor=[*(np.asarray(rgb) * brightness), 1.0], metallicFactor=0.0, roughnessFactor=1.0))
        return m

    if not flat:
        d = light - mesh.vertices
        d = d / np.linalg.norm(d, axis=1, keepdims=True)
        lit = np.clip(LIGHT_AMBIENT + LIGHT_DIFFUSE * np.maximum((d * mesh.vertex_normals).sum(1), 0.0), 0.0, 1.0)
        return [part(mesh, float(lit.mean()))]
    parts = []
    normals = np.round(mesh.face_normals, 6)
    for n in np.unique(normals, axis=0):  # the box's six sides
        faces = mesh.faces[(normals == n).all(1)]
        side = trimesh.Trimesh(vertices=mesh.vertices, faces=faces, process=False)
        side.remove_unreferenced_vertices()
        centre = side.vertices.mean(0)
        d = (light - centre) / np.linalg.norm(light - centre)
        parts.append(part(side, float(np.clip(LIGHT_AMBIENT + LIGHT_DIFFUSE * max(float(d @ n), 0.0), 0.0, 1.0))))
    return parts


def house_scene(layout: HouseLayout):
    """The house as a trimesh Scene, Y-up, in MiniWorld's coordinates (metres)."""
    trimesh = _trimesh()
    tex = _Textures()
    scene = trimesh.Scene()
    min_x, max_x, min_z, max_z = layout.bounds
    light = np.array([(min_x + max_x) / 2, LIGHT_HEIGHT, (min_z + max_z) / 2])  # house_render's light_pos
    inward = ((-1.0, 0.0), (1.0, 0.0), (0.0, 1.0), (0.0, -1.0))  # _room_edges' order: east, west, north, south
    for i, r in enumerate(layout.rooms):
        wall, floor, ceil = tex.get(r.wall_tex), tex.get(r.floor_tex), tex.get(r.ceil_tex)
        scene.add_geometry(_flat(trimesh, floor, r.min_x, r.max_x, r.min_z, r.max_z, 0.0, True, light), f"floor_{i}")
        scene.add_geometry(_flat(trimesh, ceil, r.min_x, r.max_x, r.min_z, r.max_z, WALL_HEIGHT, False, light),
                           f"ceiling_{i}")
        for k, (pt, lo, hi, cuts) in enumerate(_room_edges(layout, i)):
            start = lo
            for c0, c1 in [*cuts, (hi, hi)]:
                if c0 > start + 1e-6:  # a full-height piece between openings
                    scene.add_geometry(_wall(trimesh, wall, pt(start), pt(c0), 0.0, WALL_HEIGHT, inward[k], light),
                                       f"wall_{i}_{k}_{start:.2f}")
                if c1 > c0:  # the lintel above a door opening
                    scene.add_geometry(_wall(trimesh, wall, pt(c0), pt(c1), DOOR_HEIGHT, WALL_HEIGHT, inward[k], light),
                                       f"lintel_{i}_{k}_{c0:.2f}")
                start = max(start, c1)
    for k, d in enumerate(layout.doors):  # the passage through the wall: floor, jambs, ceiling
        ra = layout.rooms[d.a]
        wall, floor, ceil = tex.get(ra.wall_tex), tex.get(ra.floor_tex), tex.get(ra.ceil_tex)
        x0, x1, z0, z1 = d.rect(layout.rooms)
        scene.add_geometry(_flat(trimesh, floor, x0, x1, z0, z1, 0.0, True, light), f"door_floor_{k}")
        scene.add_geometry(_flat(trimesh, ceil, x0, x1, z0, z1, DOOR_HEIGHT, False, light), f"door_ceiling_{k}")
        # the two jambs (a, b, normal into the passage)
        jambs = ((((x0, z0), (x1, z0), (0.0, 1.0)), ((x0, z1), (x1, z1), (0.0, -1.0))) if d.axis == "x" else
                 (((x0, z0), (x0, z1), (1.0, 0.0)), ((x1, z0), (x1, z1), (-1.0, 0.0))))
        for j, (a, b, n) in enumerate(jambs):
            scene.add_geometry(_wall(trimesh, wall, a, b, 0.0, DOOR_HEIGHT, n, light), f"door_jamb_{k}_{j}")
    for k, p in enumerate(layout.pictures):
        image = tex.get(p.tex)
        w, h = image.size
        half, height = p.width / 2, p.width * h / w
        # yaw points into the room; the picture's left-to-right runs along (sin yaw, cos yaw) in (x, z)
        cx, cz = p.x + 0.01 * math.cos(p.yaw), p.z - 0.01 * math.sin(p.yaw)
        sx, sz = math.sin(p.yaw), math.cos(p.yaw)
        y0, y1 = PICTURE_HEIGHT - height / 2, PICTURE_HEIGHT + height / 2
        corners = np.array([[cx - half * sx, y0, cz - half * sz], [cx + half * sx, y0, cz + half * sz],
                            [cx + half * sx, y1, cz + half * sz], [cx - half * sx, y1, cz - half * sz]])
        lit = _lighting(corners, np.array([math.cos(p.yaw), 0.0, -math.sin(p.yaw)]), light)
        scene.add_geometry(_quad(trimesh, corners, UNIT_UV, _lit_picture(image, p.width, height, lit)),
                           f"picture_{k}")
    meshes: dict = {}
    for k, o in enumerate(layout.objects):
        m = _object_mesh(trimesh, o.cat, meshes)
        m.apply_transform(trimesh.transformations.rotation_matrix(o.yaw, [0.0, 1.0, 0.0]))
        m.apply_translation([o.x, 0.0, o.z])
        if o.cat.shape in ("ball", "box"):  # plain colours: MiniWorld's lighting folded into the colour
            for j, side in enumerate(_lit_solid(trimesh, m, MINIWORLD_RGB[o.cat.color], light, o.cat.shape == "box")):
                scene.add_geometry(side, f"object_{k}_{o.cat.name}_{j}")
        else:
            scene.add_geometry(m, f"object_{k}_{o.cat.name}")
    return scene


def write_glb(layout: HouseLayout, path: str | Path) -> Path:
    """Write the house stage as a .glb habitat-sim 0.2.2 loads (Z-up: turned +90 deg about x)."""
    trimesh = _trimesh()
    scene = house_scene(layout)
    scene.apply_transform(trimesh.transformations.rotation_matrix(math.pi / 2, [1.0, 0.0, 0.0]))  # (x,y,z)->(x,-z,y)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(scene.export(file_type="glb"))
    return path
