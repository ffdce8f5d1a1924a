// Linked into every program that can load plugins (tsr_plugin_host in engine/plugin/CMakeLists.txt): exported
// with the engine's symbols, it tells the loader that a plugin's references to the engine will resolve here.
extern "C" __attribute__((visibility("default"))) const int tessera_plugin_host_v1 = 1;
