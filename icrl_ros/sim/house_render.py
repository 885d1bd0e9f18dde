"""First-person rendering of a house layout with MiniWorld, headless through EGL.

MiniWorld draws with pyglet's OpenGL. ``pyglet.options["headless"] = True`` must be set
before pyglet's GL / window modules are first imported, so this module imports MiniWorld
lazily (``_miniworld()``) and the rest of ``icrl_ros.sim`` never imports it.

Physics (collisions, geodesics, visibility) is in ``house_nav``; MiniWorld here only
draws: rooms, doorways, objects, pictures, from the agent's camera.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import io
import math
import sys
import warnings
from functools import lru_cache
from types import SimpleNamespace

import numpy as np

from icrl_ros.sim.house_layout import DOOR_HEIGHT, WALL_HEIGHT, HouseLayout, miniworld_dir

CAMERA_HEIGHT = 0.9  # metres, about a mobile base's head camera
CAMERA_PITCH_DEG = -15.0  # looking slightly down, so objects on the floor nearby show
FOV_Y_DEG = 79.0  # square images, so this is also the horizontal field of view
PICTURE_HEIGHT = 1.45

EGL_HELP = (
    "MiniWorld renders headless through EGL (Mesa's software renderer on a CPU). "
    "Install the system libraries, e.g. on Debian / Ubuntu:\n"
    "    apt-get install -y libegl1 libegl-mesa0 libgl1-mesa-dri libgl1 libglu1-mesa\n"
    "(on a GPU machine the vendor's EGL library works too)."
)


@lru_cache(maxsize=1)
def _miniworld() -> SimpleNamespace:
    """Import MiniWorld in headless mode; a clear error if EGL / OpenGL is missing."""
    win = sys.modules.get("pyglet.window")
    if win is not None and not sys.modules["pyglet"].options.get("headless", False):
        warnings.warn("pyglet.window was imported before icrl_ros set headless mode; "
                      "MiniWorld will try to open a display", RuntimeWarning, stacklevel=3)
    if importlib.util.find_spec("miniworld") is None:
        raise ImportError("the MiniWorld house needs the `miniworld` package: pip install miniworld")
    import pyglet

    pyglet.options["headless"] = True
    try:
        from pyglet import gl  # loads libEGL / libGL and opens pyglet's hidden shadow window
        from miniworld import entity, miniworld, opengl
    except Exception as e:  # ImportError for a missing library, EGL errors for no driver
        raise RuntimeError(f"could not load OpenGL / EGL for MiniWorld ({type(e).__name__}: {e}).\n{EGL_HELP}") from e
    # Register every texture file under its exact stem ("concrete_3", "floor_tiles_white",
    # "portraits/adelaide_hanscom1"); MiniWorld's own lookup only finds "<name>_1.png".
    tex_root = miniworld_dir() / "textures"
    for path in sorted(tex_root.rglob("*.png")):
        opengl.Texture.tex_paths.setdefault(str(path.relative_to(tex_root).with_suffix("")), [str(path)])
    # MiniWorld's loader converts pixels through pyglet's pure-Python path (~0.3 s per mesh
    # texture, ~75 ms per wall texture); load with Pillow instead when it is installed.
    if importlib.util.find_spec("PIL") is not None:
        opengl.Texture.load = classmethod(lambda cls, path: _load_texture(gl, path))
    return SimpleNamespace(gl=gl, entity=entity, miniworld=miniworld, opengl=opengl)


def _load_texture(gl, path: str) -> SimpleNamespace:
    """A mipmapped RGB texture from a PNG, shaped like the pyglet texture MiniWorld keeps
    (``target``, ``id``, ``width``, ``height``)."""
    from PIL import Image

    img = Image.open(path).convert("RGBA").transpose(Image.Transpose.FLIP_TOP_BOTTOM)  # GL rows go up
    data = img.tobytes()
    tex_id = gl.GLuint(0)
    gl.glGenTextures(1, tex_id)
    gl.glBindTexture(gl.GL_TEXTURE_2D, tex_id)
    gl.glTexImage2D(gl.GL_TEXTURE_2D, 0, gl.GL_RGB, img.width, img.height, 0, gl.GL_RGBA, gl.GL_UNSIGNED_BYTE, data)
    gl.glHint(gl.GL_GENERATE_MIPMAP_HINT, gl.GL_NICEST)
    gl.glGenerateMipmap(gl.GL_TEXTURE_2D)
    gl.glTexParameteri(gl.GL_TEXTURE_2D, gl.GL_TEXTURE_MAG_FILTER, gl.GL_LINEAR)
    gl.glTexParameteri(gl.GL_TEXTURE_2D, gl.GL_TEXTURE_MIN_FILTER, gl.GL_LINEAR_MIPMAP_LINEAR)
    gl.glBindTexture(gl.GL_TEXTURE_2D, 0)
    return SimpleNamespace(target=gl.GL_TEXTURE_2D, id=tex_id.value, width=img.width, height=img.height)


class _FrameBuffer:
    """Single-sample RGBA8 + depth render target read back with glReadPixels. MiniWorld's
    FrameBuffer renders into a float32 multisample texture and blits colour and depth to
    a second buffer before reading; on a software renderer this one is much cheaper."""

    def __init__(self, gl, width: int, height: int) -> None:
        self.gl, self.width, self.height = gl, width, height
        self.fbo, color, depth = gl.GLuint(0), gl.GLuint(0), gl.GLuint(0)
        gl.glGenFramebuffers(1, self.fbo)
        gl.glBindFramebuffer(gl.GL_FRAMEBUFFER, self.fbo)
        gl.glGenRenderbuffers(1, color)
        gl.glBindRenderbuffer(gl.GL_RENDERBUFFER, color)
        gl.glRenderbufferStorage(gl.GL_RENDERBUFFER, gl.GL_RGBA8, width, height)
        gl.glFramebufferRenderbuffer(gl.GL_FRAMEBUFFER, gl.GL_COLOR_ATTACHMENT0, gl.GL_RENDERBUFFER, color)
        gl.glGenRenderbuffers(1, depth)
        gl.glBindRenderbuffer(gl.GL_RENDERBUFFER, depth)
        gl.glRenderbufferStorage(gl.GL_RENDERBUFFER, gl.GL_DEPTH_COMPONENT24, width, height)
        gl.glFramebufferRenderbuffer(gl.GL_FRAMEBUFFER, gl.GL_DEPTH_ATTACHMENT, gl.GL_RENDERBUFFER, depth)
        status = gl.glCheckFramebufferStatus(gl.GL_FRAMEBUFFER)
        gl.glBindFramebuffer(gl.GL_FRAMEBUFFER, 0)
        if status != gl.GL_FRAMEBUFFER_COMPLETE:
            raise RuntimeError(f"incomplete OpenGL frame buffer (status {status:#x})")
        self.img = np.zeros((height, width, 3), np.uint8)
        self._renderbuffers = (color, depth)

    def delete(self) -> None:
        gl = self.gl
        gl.glDeleteFramebuffers(1, self.fbo)
        for rb in self._renderbuffers:
            gl.glDeleteRenderbuffers(1, rb)

    def bind(self) -> None:
        self.gl.glBindFramebuffer(self.gl.GL_FRAMEBUFFER, self.fbo)
        self.gl.glViewport(0, 0, self.width, self.height)

    def resolve(self) -> np.ndarray:
        gl = self.gl
        gl.glPixelStorei(gl.GL_PACK_ALIGNMENT, 1)
        gl.glReadPixels(0, 0, self.width, self.height, gl.GL_RGB, gl.GL_UNSIGNED_BYTE,
                        self.img.ctypes.data_as(ctypes.POINTER(gl.GLubyte)))
        gl.glBindFramebuffer(gl.GL_FRAMEBUFFER, 0)
        return self.img[::-1]  # GL rows run bottom-up


@lru_cache(maxsize=1)
def _shared_window():
    """The process's hidden window whose GL context every HouseWorld draws in (pyglet's
    own shadow window when it made one)."""
    mw = _miniworld()
    win = getattr(mw.gl, "_shadow_window", None)
    if win is None:
        import pyglet

        win = pyglet.window.Window(width=1, height=1, visible=False)
    return win


@lru_cache(maxsize=1)
def _world_class() -> type:
    mw = _miniworld()
    gl, entity = mw.gl, mw.entity

    class LowPolyBall(entity.Entity):
        """A coloured sphere. MiniWorld's ball mesh has 5,192 triangles, which made balls
        most of the frame time; a 16 x 10 GLU sphere looks the same at these sizes."""

        _quadric = None

        def __init__(self, color: str, size: float) -> None:
            super().__init__()
            self.color_vec = entity.COLORS[color]
            self.radius, self.height = size / 2, size

        def render(self) -> None:
            if LowPolyBall._quadric is None:
                LowPolyBall._quadric = gl.gluNewQuadric()
            gl.glDisable(gl.GL_TEXTURE_2D)
            gl.glColor3f(*self.color_vec)
            gl.glPushMatrix()
            gl.glTranslatef(self.pos[0], self.height / 2, self.pos[2])
            gl.gluSphere(LowPolyBall._quadric, self.height / 2, 16, 10)
            gl.glPopMatrix()
            gl.glColor3f(1, 1, 1)

    model_lists: dict[str, int] = {}  # category name -> display list drawing it at the origin

    def model_list(cat) -> int:
        """One display list per category and process (all worlds share the GL context):
        a MiniWorld entity (Box, MeshEnt) or a LowPolyBall drawn at the origin, yaw 0."""
        if cat.name not in model_lists:
            if cat.shape == "box":
                ent = entity.Box(cat.color, size=cat.height)
                ent.randomize(mw.miniworld.DEFAULT_PARAMS, None)  # sets its colour, no noise
            elif cat.shape == "ball":
                ent = LowPolyBall(cat.color, size=cat.height)
            elif cat.shape == "key":
                ent = entity.MeshEnt(f"key_{cat.color}", height=cat.height, static=True)
            else:
                ent = entity.MeshEnt(cat.shape, height=cat.height, static=True)
            ent.pos, ent.dir = np.zeros(3), 0.0
            lid = gl.glGenLists(1)
            gl.glNewList(lid, gl.GL_COMPILE)
            ent.render()
            gl.glColor3f(1, 1, 1)
            gl.glEndList()
            model_lists[cat.name] = lid
        return model_lists[cat.name]

    class HouseWorld(mw.miniworld.MiniWorldEnv):
        """A MiniWorld scene built from a ``HouseLayout`` (used for drawing only)."""

        def __init__(self, layout: HouseLayout, image_size: int, antialias: bool) -> None:
            self.layout = layout
            self._static_list = None
            params = mw.miniworld.DEFAULT_PARAMS.no_random()
            params.set("cam_height", CAMERA_HEIGHT)
            params.set("cam_pitch", CAMERA_PITCH_DEG)
            params.set("cam_fov_y", FOV_Y_DEG)
            params.set("cam_fwd_disp", 0.0)
            params.set("light_ambient", [0.5, 0.5, 0.5])
            params.set("light_color", [0.6, 0.6, 0.6])
            self._params_template = params
            # Instead of MiniWorldEnv.__init__, which opens a hidden window (a GL context of
            # its own) per env: switching contexts between envs of one process halves the
            # frame rate, so every world draws in one shared context with its own FBO.
            self.params, self.domain_rand = params, False
            self.max_episode_steps = 2**31 - 1
            self.window, self.render_mode, self.view = None, None, "agent"
            self.shadow_window = _shared_window()
            self.shadow_window.switch_to()
            gl.glEnable(gl.GL_DEPTH_TEST)
            gl.glEnable(gl.GL_CULL_FACE)
            # MiniWorld's buffer: 8x MSAA (4 on llvmpipe) into float32 colour, then a blit.
            self.obs_fb = (mw.opengl.FrameBuffer(image_size, image_size, 8) if antialias
                           else _FrameBuffer(gl, image_size, image_size))
            self.reset()

        def set_layout(self, layout: HouseLayout) -> None:
            self.layout = layout
            self.reset()

        def reset(self, *, seed=None, options=None):
            min_x, max_x, min_z, max_z = self.layout.bounds
            self.params = self._params_template.copy()
            self.params.set("light_pos", [(min_x + max_x) / 2, 4.0, (min_z + max_z) / 2])
            self.shadow_window.switch_to()
            return super().reset(seed=seed, options=options)

        def _gen_world(self) -> None:
            L = self.layout
            rooms = [self.add_rect_room(r.min_x, r.max_x, r.min_z, r.max_z, wall_height=WALL_HEIGHT,
                                        wall_tex=r.wall_tex, floor_tex=r.floor_tex, ceil_tex=r.ceil_tex)
                     for r in L.rooms]
            # add_rect_room edges: 0 east (max_x), 1 north (min_z), 2 west (min_x), 3 south (max_z).
            for d in L.doors:
                ra = L.rooms[d.a]  # the passage takes the look of the west / north room
                x0, x1, z0, z1 = d.rect(L.rooms)
                passage = self.add_rect_room(x0, x1, z0, z1, wall_height=DOOR_HEIGHT,
                                             wall_tex=ra.wall_tex, floor_tex=ra.floor_tex, ceil_tex=ra.ceil_tex)
                span = dict(min_z=d.lo, max_z=d.hi) if d.axis == "x" else dict(min_x=d.lo, max_x=d.hi)
                ea, eb, pa, pb = (0, 2, 2, 0) if d.axis == "x" else (3, 1, 1, 3)
                rooms[d.a].add_portal(ea, max_y=d.height, **span)
                rooms[d.b].add_portal(eb, max_y=d.height, **span)
                passage.add_portal(pa, start_pos=0, end_pos=d.hi - d.lo)
                passage.add_portal(pb, start_pos=0, end_pos=d.hi - d.lo)
            # Objects are not MiniWorld entities of this world: each frame draws the shared
            # per-category model lists of the instances inside the view frustum (compiling
            # them into every world's static list cost memory bandwidth and drew the ~75%
            # of objects that are out of view).
            self._obj_lists = [model_list(o.cat) for o in L.objects]
            self._obj_pose = [(o.x, o.z, math.degrees(o.yaw)) for o in L.objects]
            self._obj_centre = np.array([[o.x, o.cat.height / 2, o.z] for o in L.objects]).reshape(-1, 3)
            self._obj_bound = np.array([math.hypot(o.cat.radius, o.cat.height / 2) for o in L.objects])
            for p in L.pictures:
                # Stand 1 cm off the wall, facing into the room.
                pos = [p.x + 0.01 * math.cos(p.yaw), PICTURE_HEIGHT, p.z - 0.01 * math.sin(p.yaw)]
                self.entities.append(entity.ImageFrame(pos=pos, dir=p.yaw, tex_name=p.tex, width=p.width))
            r0 = L.rooms[0]
            self.place_agent(pos=np.array([(r0.min_x + r0.max_x) / 2, 0.0, (r0.min_z + r0.max_z) / 2]), dir=0.0)

        # MiniWorld compiles the static scene into display list 1 for every env; GL contexts
        # in one process share display lists, so each world keeps a list of its own.
        def _render_static(self) -> None:
            if self._static_list is None:
                self._static_list = gl.glGenLists(1)
            gl.glNewList(self._static_list, gl.GL_COMPILE)
            gl.glLightfv(gl.GL_LIGHT0, gl.GL_POSITION, (gl.GLfloat * 4)(*self.light_pos, 1))
            gl.glLightfv(gl.GL_LIGHT0, gl.GL_AMBIENT, (gl.GLfloat * 4)(*self.light_ambient, 1))
            gl.glLightfv(gl.GL_LIGHT0, gl.GL_DIFFUSE, (gl.GLfloat * 4)(*self.light_color, 1))
            gl.glEnable(gl.GL_LIGHTING)
            gl.glEnable(gl.GL_LIGHT0)
            gl.glShadeModel(gl.GL_SMOOTH)
            gl.glEnable(gl.GL_COLOR_MATERIAL)
            gl.glColorMaterial(gl.GL_FRONT_AND_BACK, gl.GL_AMBIENT_AND_DIFFUSE)
            gl.glEnable(gl.GL_TEXTURE_2D)
            for room in self.rooms:
                room._render()
            for ent in self.entities:
                if ent.is_static:
                    ent.render()
            gl.glEndList()

        def _in_view(self) -> np.ndarray:
            """Objects whose bounding sphere meets the camera frustum (side planes)."""
            a = self.agent
            f = a.cam_dir
            r = np.array([math.sin(a.dir), 0.0, math.cos(a.dir)])
            u = np.cross(r, f)
            v = self._obj_centre - a.cam_pos  # (N, 3)
            zc, xc, yc = v @ f, np.abs(v @ r), np.abs(v @ u)
            t = math.tan(math.radians(a.cam_fov_y) / 2)  # square image: same both ways
            R, k = self._obj_bound, math.sqrt(1 + t * t)
            return (zc > -R) & (xc - t * zc <= R * k) & (yc - t * zc <= R * k)

        def _render_world(self, frame_buffer, render_agent):
            gl.glCallList(self._static_list)
            for i in np.flatnonzero(self._in_view()):
                x, z, yaw_deg = self._obj_pose[i]
                gl.glPushMatrix()
                gl.glTranslatef(x, 0.0, z)
                gl.glRotatef(yaw_deg, 0.0, 1.0, 0.0)
                gl.glCallList(self._obj_lists[i])
                gl.glPopMatrix()
            if render_agent:
                self.agent.render()
            return frame_buffer.resolve()

        def close(self) -> None:  # the shared window stays open for the other worlds
            self.shadow_window.switch_to()
            if self._static_list is not None:
                gl.glDeleteLists(self._static_list, 1)
                self._static_list = None
            if isinstance(self.obs_fb, _FrameBuffer):
                self.obs_fb.delete()

    return HouseWorld


class HouseRenderer:
    """Draws a layout from a camera pose; ``set_layout`` rebuilds the scene for a new trial."""

    def __init__(self, layout: HouseLayout, image_size: int = 64, antialias: bool = False) -> None:
        cls = _world_class()
        try:
            # MiniWorld prints notes such as "Falling back to num_samples=4".
            with contextlib.redirect_stdout(io.StringIO()):
                self.world = cls(layout, image_size, antialias)
        except Exception as e:  # EGL present but unusable: no display / no driver
            if "EGL" in type(e).__name__ or "egl" in str(e).lower() or "display" in str(e).lower():
                raise RuntimeError(f"could not create a headless OpenGL context ({e}).\n{EGL_HELP}") from e
            raise
        self.image_size = image_size

    def set_layout(self, layout: HouseLayout) -> None:
        self.world.set_layout(layout)

    def render(self, x: float, z: float, yaw: float) -> np.ndarray:
        """RGB (H, W, 3) uint8 image from the agent's camera at floor pose (x, z, yaw)."""
        agent = self.world.agent
        agent.pos = np.array([x, 0.0, z])
        agent.dir = yaw
        return self.world.render_obs().copy()

    def close(self) -> None:
        self.world.close()
