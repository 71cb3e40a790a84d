import re,sys,glob,statistics as st,collections
rows=collections.defaultdict(lambda: collections.defaultdict(list))
for d in sys.argv[1:]:
  for f in sorted(glob.glob(d+'/*.txt')):
    name=f.split('/')[-1].split('.')[0]
    t=open(f).read()
    m=re.search(r'^smbq-quic\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)/([\d.]+), ([\d.]+)/([\d.]+)',t,re.M)
    m2=re.search(r'^smbq-tcp-enc\s+([\d.]+)\s+([\d.]+)',t,re.M)
    w=re.search(r'^smbq-quic\s+write\s+(\d+)\s+(\d+)\s+\S+\s+\S+\s+(\S+)',t,re.M)
    r=re.search(r'^smbq-quic\s+read\s+(\d+)\s+(\d+)\s+\S+\s+\S+\s+(\S+)',t,re.M)
    if not (m and m2 and w and r): continue
    R=rows[name]
    R['wr_ratio'].append(float(m.group(1))/float(m2.group(1)))
    R['rd_ratio'].append(float(m.group(2))/float(m2.group(2)))
    R['srv_w'].append(int(w.group(1))); R['cli_w'].append(int(w.group(2)))
    R['srv_r'].append(int(r.group(1))); R['cli_r'].append(int(r.group(2)))
    R['acks_w'].append(float(w.group(3))); R['acks_r'].append(float(r.group(3)))
keys=['wr_ratio','rd_ratio','srv_w','cli_w','srv_r','cli_r','acks_w','acks_r']
print('| build | runs | '+' | '.join(keys)+' |')
for n in ['base','ring','timer','seq','ack16','ack32']:
    if n not in rows: continue
    R=rows[n]
    cells=[]
    for k in keys:
        v=R[k]
        if k.startswith(('wr','rd','acks')): cells.append('%.3f'%st.median(v))
        else: cells.append('%.0f (min %d)'%(st.median(v),min(v)))
    print('| %s | %d | %s |'%(n,len(R['wr_ratio']),' | '.join(cells)))
