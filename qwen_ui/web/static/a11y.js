// qwen-ui: names and alt texts that Gradio's markup lacks, in the page's language.
// Called once on page load with the words of qwen_ui/texts.py ({en: {...}, zh: {...}});
// a MutationObserver applies them again whenever Gradio redraws part of the page, and
// only writes an attribute when its value changes (so it never feeds itself).
(words) => {
  // Gradio's own names (English, or its Chinese translation when the browser asks for
  // Chinese) -> our key; an element once recognised keeps its key in data-qwen-label
  const gradioNames = {
    "Toggle Sidebar": "label_sidebar", "Upload a file": "label_attach",
    "Submit": "label_send", "Clear": "label_clear", "Copy message": "label_copy",
    "Copied message": "label_copied", "Fullscreen": "label_fullscreen",
    "Exit fullscreen": "label_exit_fullscreen", "Exit full screen": "label_exit_fullscreen",
    "Download": "label_download", "Share": "label_share", "Close": "label_close",
    "Remove": "label_remove", "Retry": "label_retry", "Edit": "label_edit",
    "chatbot conversation": "chat",
    "Multimedia input field": "question",
    "清除": "label_clear", "清空对话": "label_clear", "复制消息": "label_copy",
    "全屏": "label_fullscreen", "退出全屏": "label_exit_fullscreen", "下载": "label_download",
    "分享": "label_share", "上传文件": "label_attach", "提交": "label_send",
    "关闭": "label_close", "移除": "label_remove", "重试": "label_retry", "编辑": "label_edit",
  };
  const fixed = [  // [selector, key]: found by place, whatever Gradio calls them
    [".toggle-button", "label_sidebar"],
    ["#qwen-question .upload-button", "label_attach"],
    ["#qwen-question .submit-button", "label_send"],
    ["#qwen-question textarea", "question"],
    [".qwen-progress", "progress"],
  ];
  const set = (el, attr, value) => {
    if (el && value && el.getAttribute(attr) !== value) el.setAttribute(attr, value);
  };
  const fill = (template, params) => template.replace(/\{(\w+)\}/g, (_, k) => params[k] ?? "");
  const fileName = (img) => {
    try {
      return decodeURIComponent(new URL(img.src, location.href).pathname.split("/").pop());
    } catch (error) {
      return "";
    }
  };
  const language = () => document.querySelector("#qwen-lang input:checked")?.value || "en";

  const name = (el, key, w) => {
    el.dataset.qwenLabel = key;
    set(el, "aria-label", w[key]);
    if (el.hasAttribute("title")) set(el, "title", w[key]);
  };

  const apply = () => {
    const lang = language();
    const w = words[lang] || words.en;
    set(document.documentElement, "lang", lang === "zh" ? "zh-CN" : "en");
    for (const [selector, key] of fixed) {
      for (const el of document.querySelectorAll(selector)) name(el, key, w);
    }
    // Gradio's file thumbnails are list items whose parent has no list role
    for (const item of document.querySelectorAll("[role=listitem]")) {
      const parent = item.parentElement;
      if (parent && !parent.hasAttribute("role")) set(parent, "role", "list");
    }
    for (const el of document.querySelectorAll("[aria-label], [data-qwen-label]")) {
      const key = el.dataset.qwenLabel || gradioNames[el.getAttribute("aria-label")];
      if (key) name(el, key, w);
    }
    // the stage message's title is a toggle (role=button) holding a second, nameless
    // toggle (its arrow): the arrow becomes the one control, named by the title's text;
    // clicks on the title still reach Gradio's handler
    for (const title of document.querySelectorAll("#qwen-chat .title")) {
      const arrow = title.querySelector("button");
      if (!arrow) continue;
      if (title.getAttribute("role") === "button") {
        title.removeAttribute("role");
        title.removeAttribute("tabindex");
      }
      set(arrow, "aria-label", title.textContent.trim());
      set(arrow, "title", title.textContent.trim());
    }
    // chat images, numbered across the conversation as the stages number them
    const chat = document.querySelectorAll("#qwen-chat .image-frame img, #qwen-chat .message img");
    [...new Set(chat)].forEach((img, i) => {
      set(img, "alt", fill(w.image_alt, { number: i + 1, name: fileName(img) }));
    });
    // example images: "image 2 of 3, name" within each example
    for (const item of document.querySelectorAll("[id^=qwen-examples-] .gallery-item")) {
      const images = item.querySelectorAll("img");
      images.forEach((img, i) => {
        const params = { number: i + 1, total: images.length, name: fileName(img) };
        set(img, "alt", fill(w.image_alt_of, params));
      });
    }
  };

  let queued = false;
  const schedule = () => {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => {
      queued = false;
      apply();
    });
  };
  new MutationObserver(schedule).observe(document.body, {
    subtree: true, childList: true, characterData: true,
  });
  document.addEventListener("change", schedule, true);
  apply();
}
